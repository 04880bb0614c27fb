/**
 * The programs a session's sandbox runs: a small Python kernel (run_python) and a bash loop
 * (run_shell). Both read one request at a time from stdin and, after it, write a frame
 * `\x1e<token>{json}\n` to stdout and a fence `\x1e<token>\n` to stderr, so the worker knows
 * the call's output is complete on both streams. Everything else on stdout and stderr is the
 * call's own output, passed on live. The token is random per session, so a program's output
 * cannot end a call by printing a frame.
 */

/** Frames start with this byte (ASCII record separator) and the session's token. */
export const FRAME_START = '\x1e';

/**
 * `python3 -u -c KERNEL <token>`. The control channel is a private copy of stdin (fd 0 becomes
 * /dev/null, so `input()` or a child process never eats a request). Globals, imports, open
 * files, cwd and /tmp persist between calls. A trailing expression's repr is printed, as in a
 * notebook. SIGINT (a timeout or a cancel) raises KeyboardInterrupt in the call; between calls
 * it is ignored, so an interrupt that comes late never kills the kernel.
 *
 * Rich outputs, as a Jupyter kernel's display_data: matplotlib draws with an in-memory backend
 * (`module://toolgate_inline`, Agg underneath, chosen as matplotlib is imported unless
 * MPLBACKEND names another); `plt.show()` and the end of each call send every
 * open figure as an `image/png` frame `{"t":"display","mime","data"}` on stdout and close it.
 * `display(obj)` sends a figure or an object with `_repr_png_` as `image/png`, anything else as
 * `text/plain`. The kernel sends at most `count` per call, each at most `bytes`, and only a
 * frame `{"t":"display","mime","omitted":<code>,"bytes"}` for the others, so a huge figure
 * never crosses the pipe; the worker checks every frame again (session.ts): code in the
 * session can write frames too.
 */
export const PYTHON_KERNEL = String.raw`
import ast, base64, importlib.abc, importlib.util, io, json, os, signal, sys, traceback
TOKEN = sys.argv[1]
MAX_ATTACHMENT = int(sys.argv[2])
MAX_ATTACHMENTS = int(sys.argv[3])
shown = [0]
ctrl = os.fdopen(os.dup(0), 'rb', buffering=0)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
sys.stdin = open(os.devnull)
sys.argv = ['']
ns = {'__name__': '__main__', '__builtins__': __builtins__}

def frame(obj):
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os.write(1, ('\x1e' + TOKEN + json.dumps(obj) + '\n').encode())
    os.write(2, ('\x1e' + TOKEN + '\n').encode())

def emit(obj):
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os.write(1, ('\x1e' + TOKEN + json.dumps(obj) + '\n').encode())

def omitted(mime, size):
    if shown[0] >= MAX_ATTACHMENTS:
        return 'too_many_attachments'
    if size > MAX_ATTACHMENT:
        return 'attachment_too_large'
    shown[0] += 1
    return None

def display_png(data):
    why = omitted('image/png', len(data))
    if why:
        emit({'t': 'display', 'mime': 'image/png', 'omitted': why, 'bytes': len(data)})
    else:
        emit({'t': 'display', 'mime': 'image/png', 'data': base64.b64encode(data).decode()})

def display_text(text):
    size = len(text.encode('utf-8', 'replace'))
    why = omitted('text/plain', size)
    if why:
        emit({'t': 'display', 'mime': 'text/plain', 'omitted': why, 'bytes': size})
    else:
        emit({'t': 'display', 'mime': 'text/plain', 'data': text})

def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format='png', bbox_inches='tight')
    return buf.getvalue()

def flush_figures():
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return
    try:
        for num in plt.get_fignums():
            display_png(figure_png(plt.figure(num)))
    finally:
        plt.close('all')

def display(*objs):
    """Shows each object after the call's output: a figure or _repr_png_ as an image, else its text."""
    for obj in objs:
        mpl_figure = sys.modules.get('matplotlib.figure')
        if mpl_figure is not None and isinstance(obj, mpl_figure.Figure):
            display_png(figure_png(obj))
            continue
        to_png = getattr(obj, '_repr_png_', None)
        data = to_png() if callable(to_png) else None
        if isinstance(data, bytes):
            display_png(data)
        else:
            display_text(obj if isinstance(obj, str) else repr(obj))

INLINE_BACKEND = '''
from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas
from matplotlib.backend_bases import FigureManagerBase as FigureManager
def show(*args, **kwargs):
    _flush()
'''

class ChooseBackend(importlib.abc.Loader):
    # Wraps matplotlib's own loader: once it is imported, its backend is this kernel's, unless
    # the code's environment names one. Not MPLBACKEND: the code's child processes inherit the
    # environment, and this backend exists in the kernel only.
    def __init__(self, loader):
        self.loader = loader
    def create_module(self, spec):
        return self.loader.create_module(spec)
    def exec_module(self, module):
        self.loader.exec_module(module)
        if not os.environ.get('MPLBACKEND'):
            module.rcParams['backend'] = 'module://toolgate_inline'
    def __getattr__(self, name):
        return getattr(self.loader, name)

class InlineBackend(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # matplotlib imports its backend by name when pyplot first draws; this one lives here.
    def find_spec(self, name, path, target=None):
        if name == 'toolgate_inline':
            return importlib.util.spec_from_loader(name, self)
        if name != 'matplotlib':
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, 'find_spec'):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = ChooseBackend(spec.loader)
                    return spec
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module._flush = flush_figures
        exec(INLINE_BACKEND, module.__dict__)

sys.meta_path.insert(0, InlineBackend())
ns['display'] = display

def readline():
    buf = bytearray()
    while True:
        b = ctrl.read(1)
        if not b:
            return None
        if b == b'\n':
            return bytes(buf)
        buf += b

def run(code):
    tree = ast.parse(code, '<session>', 'exec')
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, '<session>', 'exec'), ns)
    if last is not None:
        value = eval(compile(last, '<session>', 'eval'), ns)
        if value is not None:
            print(repr(value))

def report():
    kind, value, tb = sys.exc_info()
    # Not the kernel's own frame: the model reads its code's traceback only.
    traceback.print_exception(kind, value, tb.tb_next if tb is not None else None)

signal.signal(signal.SIGINT, signal.SIG_IGN)
frame({'t': 'ready'})
while True:
    line = readline()
    if line is None:
        break
    try:
        request = json.loads(line)
    except ValueError:
        continue
    code = 0
    shown[0] = 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run(request['code'])
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        report()
        code = 130
    except SystemExit as e:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        report()
        code = 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        flush_figures()
    except BaseException:
        report()
    frame({'t': 'done', 'exitCode': code})
`;

/** What the worker writes to a shell session's stdin to interrupt the command running now. */
export const SHELL_INTERRUPT = '!\n';

/**
 * `bash -c SHELL_LOOP tg <token>`. A request is `<bytes>\n<command>`; the command is eval'd in
 * the loop's shell, so cwd, variables, functions and /tmp persist; fd 0 is /dev/null for it.
 * `exit` ends the session, as it would a terminal. A signal to bash cannot interrupt it (bash
 * waits for its foreground command before it heeds one), so a reader subshell takes stdin:
 * requests go on to the loop through a FIFO, and a line `!` sends SIGINT to the loop's other
 * children, the command's processes, and to the loop, whose trap ends the command line (status
 * 130, as a terminal's Ctrl-C would). The command runs in a function: `declare` there is local.
 */
export const SHELL_LOOP = String.raw`
TOKEN="$1"
__tg_main=$$
__tg_fifo=$(mktemp -u /tmp/.toolgate-session.XXXXXX) && mkfifo -m 600 "$__tg_fifo" || exit 1
exec 3<&0 0</dev/null
(
  export LC_ALL=C
  exec 4>"$__tg_fifo"
  while IFS= read -r __tg_n <&3; do
    if [ "$__tg_n" = "!" ]; then
      for __tg_c in $(cat /proc/$__tg_main/task/$__tg_main/children 2>/dev/null); do
        [ "$__tg_c" = "$BASHPID" ] || kill -INT "$__tg_c" 2>/dev/null
      done
      kill -INT "$__tg_main"
      continue
    fi
    __tg_cmd=
    IFS= read -r -d '' -N "$__tg_n" __tg_cmd <&3
    printf '%d
%s' "${'$'}{#__tg_cmd}" "$__tg_cmd" >&4
  done
) &
exec 5<"$__tg_fifo"
rm -f "$__tg_fifo"
__tg_frame() {
  printf '%s{"t":"%s","exitCode":%d}
' "$TOKEN" "$1" "$2"
  printf '%s
' "$TOKEN" >&2
}
__tg_busy=
__tg_run() {
  __tg_busy=1
  eval "$1"
}
trap '[ -n "$__tg_busy" ] && { __tg_busy=; return 130; }' INT
__tg_frame ready 0
while :; do
  # An interrupt that comes between commands ends a read early (status > 128): read again.
  IFS= read -r __tg_n <&5 || { [ $? -gt 128 ] && continue; break; }
  __tg_cmd=
  LC_ALL=C IFS= read -r -d '' -N "$__tg_n" __tg_cmd <&5
  __tg_run "$__tg_cmd"
  __tg_rc=$?
  __tg_busy=
  __tg_frame done "$__tg_rc"
done
`;

/** `attachments`: what the Python kernel sends of one call's rich outputs (ATTACHMENT_LIMITS). */
export function kernelArgv(
  tool: 'run_python' | 'run_shell',
  token: string,
  attachments: { count: number; bytes: number },
): string[] {
  return tool === 'run_python'
    ? [
        'python3',
        '-u',
        '-c',
        PYTHON_KERNEL,
        token,
        String(attachments.bytes),
        String(attachments.count),
      ]
    : ['bash', '-c', SHELL_LOOP, 'tg', token];
}

/** One request for the kernel, as its loop reads it. */
export function encodeRequest(tool: 'run_python' | 'run_shell', code: string): string {
  if (tool === 'run_python') return JSON.stringify({ code }) + '\n';
  return `${Buffer.byteLength(code)}\n${code}`;
}
