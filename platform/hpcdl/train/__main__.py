import sys

from hpcdl.train.main import main

sys.exit(main())
