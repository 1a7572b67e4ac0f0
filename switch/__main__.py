import sys

from ecntune.switch.main import main

sys.exit(main())
