try:
    from toolkit.cli import main
except KeyboardInterrupt:  # Ctrl-C before patchbench could say anything: no traceback either
    raise SystemExit(130) from None

raise SystemExit(main())
