import sys

from evertune.cli import main

sys.exit(main())
