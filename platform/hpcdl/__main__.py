from hpcdl.cli import main

main()
