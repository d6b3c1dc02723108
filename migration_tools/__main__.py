import sys

from migration_tools.cli import main

sys.exit(main())
