"""`python -m dexp ...` is `dexp ...`."""

from dexp.cli import main

if __name__ == "__main__":
    main()
