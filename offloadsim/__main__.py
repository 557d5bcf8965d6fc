from offloadsim.cli import main

raise SystemExit(main())
