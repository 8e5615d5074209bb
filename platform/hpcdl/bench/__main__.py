import sys

from hpcdl.bench.cpu import main

sys.exit(main())
