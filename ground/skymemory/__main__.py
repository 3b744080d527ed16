from skymemory.cli import main

raise SystemExit(main())
