import sys

from pymf.cli import main

sys.exit(main())
