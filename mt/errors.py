"""User-facing errors: one line that says what is wrong and what to do, never a traceback."""

import functools
import importlib
import sys


class UserError(Exception):
    """A problem the user can fix (bad recipe, missing corpus, bad input)."""


def require_extra(module: str, extra: str, purpose: str):
    """Import an optional dependency, or say in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f'{purpose} needs {module}, in an optional extra: pip install "mt[{extra}]"') from None


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
