import sys

from pgjobs.cli import main

sys.exit(main())
