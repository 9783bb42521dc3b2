from tfunnel.cli import main

raise SystemExit(main())
