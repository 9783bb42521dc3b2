from tfunnel.entry import main

raise SystemExit(main())
