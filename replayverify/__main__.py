"""``python -m replayverify``: the same command line as the ``replayverify`` script."""

from replayverify.cli import main

if __name__ == "__main__":
    main()
