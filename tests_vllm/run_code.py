"""Child process: run the code given as argv[1] (tests that must not share the pytest process)."""

import sys

if __name__ == "__main__":
    exec(compile(sys.argv[1], "<test>", "exec"), {"__name__": "__test__"})
