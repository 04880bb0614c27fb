# The interpreter toolgate-entry starts while a warm python container waits for its call (see
# there). It waits for the word to go on fd 3, then runs the program on stdin as `python3 -u -`
# would: argv ['-'], the working directory /workspace first on sys.path, a fresh __main__, and
# an uncaught exception printed without this loader's frame, exit status 1.
import os
import signal
import sys
import types

with os.fdopen(3, "rb", buffering=0) as go:
    if go.readline() != b"go\n":
        os._exit(125)
try:
    os.chdir("/workspace")
except OSError:
    os.chdir("/tmp")
os.environ.pop("TOOLGATE_PRELOAD", None)


def _run():
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=__builtins__, __spec__=None, __loader__=None)
    sys.modules["__main__"] = main
    sys.argv[:] = ["-"]
    sys.path[0] = ""
    source = sys.stdin.buffer.read()
    try:
        code = compile(source, "<stdin>", "exec", dont_inherit=True)
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - printed as the interpreter would
        tb = e.__traceback__
        # Drop this loader's frames: the program's own start at "<stdin>".
        while tb is not None and tb.tb_frame.f_code.co_filename != "<stdin>":
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)


_run()
