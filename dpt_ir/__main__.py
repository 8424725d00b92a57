"""`python -m dpt_ir` runs the `dpt-ir` command line."""

from dpt_ir.cli.commands import main

raise SystemExit(main())
