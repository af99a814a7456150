import sys

from p2smt.cli import main

sys.exit(main())
