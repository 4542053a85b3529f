"""User-facing errors: one line that says what is wrong and what to do, never a traceback."""

import functools
import sys


class UserError(Exception):
    """A problem the user can fix (bad recipe, missing corpus, bad input)."""


def cli_entry(main):
    """Wrap a command's main(): a UserError becomes one line on stderr and exit code 2."""

    @functools.wraps(main)
    def wrapper(argv=None):
        try:
            return main(argv)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C where no handler of ours is installed: stop quietly
            print("interrupted", file=sys.stderr)
            sys.exit(130)

    return wrapper
