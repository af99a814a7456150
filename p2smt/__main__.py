import sys

from p2smt.cli.main import main

sys.exit(main())
