"""Allow ``python -m instinct_serve``."""

from instinct_serve.cli.main import main

if __name__ == "__main__":
    main()
