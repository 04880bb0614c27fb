/**
 * The in-sandbox half of the file tools: a Python program run as `python3 -c FILE_OPS` with a
 * JSON request on stdin, answering one JSON line. It confines itself to /workspace again
 * (symlinks followed one component at a time, any link leading out refused unread — the walk
 * Workspaces.resolve does on the host, with the same message — then O_NOFOLLOW on the resolved
 * path), so a symlink swapped in after the host-side check still cannot lead out, and a link out
 * gets one answer whether or not its target exists.
 */
export const FILE_OPS = String.raw`
import base64, json, os, shutil, stat, sys

ROOT = '/workspace'
req = json.load(sys.stdin)

def answer(obj):
    sys.stdout.write(json.dumps(obj))
    sys.exit(0)

def fail(code, message):
    answer({'ok': False, 'code': code, 'message': message})

def inside(p):
    return p == ROOT or p.startswith(ROOT + '/')

def through_link(rel):
    fail('invalid_path', '"%s" leads outside the workspace through a symbolic link' % rel)

def resolve(rel):
    p = os.path.normpath(os.path.join(ROOT, rel))
    if not inside(p):
        fail('invalid_path', '"%s" leads outside the workspace' % rel)
    pending = os.path.relpath(p, ROOT).split('/')
    done, links, exists = [], 0, True
    while pending:
        part = pending.pop(0)
        if part in ('', '.'):
            continue
        if part == '..':
            if not done:
                through_link(rel)
            done.pop()
            continue
        at = os.path.join(ROOT, *done, part)
        st = None
        if exists:
            try:
                st = os.lstat(at)
            except (FileNotFoundError, NotADirectoryError):
                exists = False
        if st is not None and stat.S_ISLNK(st.st_mode):
            links += 1
            if links > 40:
                fail('invalid_path', '"%s" has too many symbolic links' % rel)
            target = os.readlink(at)
            if target.startswith('/'):
                if not inside(target):
                    through_link(rel)
                done, target = [], target[len(ROOT):]
            pending = target.split('/') + pending
            continue
        done.append(part)
    return os.path.join(ROOT, *done)

def show(real):
    return os.path.relpath(real, ROOT) if real != ROOT else '.'

op = req['op']
rel = req.get('path', '')
try:
    if op == 'read':
        real = resolve(rel)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            fail('not_found', 'no such file: %s' % rel)
        except OSError as e:
            fail('invalid_path', 'cannot open %s: %s' % (rel, e.strerror))
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            fail('not_a_file', '%s is a directory (use file_list)' % rel)
        if not stat.S_ISREG(st.st_mode):
            fail('not_a_file', '%s is not a regular file' % rel)
        limit = req['maxBytes']
        with os.fdopen(fd, 'rb') as f:
            data = f.read(limit + 1)
        truncated = len(data) > limit
        data = data[:limit]
        content, encoding = None, 'base64'
        if b'\0' not in data:
            # A cut at the limit may split a UTF-8 sequence: drop up to 3 trailing bytes.
            for cut in range(0, 4 if truncated else 1):
                try:
                    content, encoding = data[:len(data) - cut].decode('utf-8'), 'utf-8'
                    break
                except UnicodeDecodeError:
                    pass
        if content is None:
            content = base64.b64encode(data).decode('ascii')
        answer({'ok': True, 'path': show(real), 'size': st.st_size, 'content': content,
                'encoding': encoding, 'truncated': truncated})

    elif op == 'write':
        real = resolve(rel)
        if real == ROOT:
            fail('invalid_path', 'give a file name, not the workspace itself')
        parent = os.path.dirname(real)
        try:
            os.makedirs(parent, exist_ok=True)
        except FileExistsError:
            fail('not_a_directory', 'a parent of %s is not a directory' % rel)
        if not inside(os.path.realpath(parent)):
            through_link(rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if req.get('append') else os.O_TRUNC)
        try:
            fd = os.open(real, flags, 0o644)
        except IsADirectoryError:
            fail('not_a_file', '%s is a directory' % rel)
        except OSError as e:
            fail('invalid_path', 'cannot open %s: %s' % (rel, e.strerror))
        data = req['content'].encode('utf-8')
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            size = os.fstat(f.fileno()).st_size
        answer({'ok': True, 'path': show(real), 'bytesWritten': len(data), 'size': size})

    elif op == 'list':
        real = resolve(rel)
        if not os.path.exists(real):
            fail('not_found', 'no such directory: %s' % (rel or '.'))
        if not os.path.isdir(real):
            fail('not_a_directory', '%s is not a directory' % rel)
        limit = req['maxEntries']
        entries = []
        with os.scandir(real) as it:
            for e in sorted(it, key=lambda e: e.name):
                st = e.stat(follow_symlinks=False)
                kind = ('symlink' if stat.S_ISLNK(st.st_mode) else 'directory' if stat.S_ISDIR(st.st_mode)
                        else 'file' if stat.S_ISREG(st.st_mode) else 'other')
                entries.append({'name': e.name, 'type': kind, 'size': st.st_size})
        answer({'ok': True, 'path': show(real), 'entries': entries[:limit], 'truncated': len(entries) > limit})

    elif op == 'delete':
        # The last component is not followed: deleting a symlink removes the link itself.
        p = os.path.normpath(os.path.join(ROOT, rel))
        if p == ROOT or not inside(p):
            fail('invalid_path', 'cannot delete "%s"' % (rel or '.'))
        parent = resolve(os.path.relpath(os.path.dirname(p), ROOT))
        target = os.path.join(parent, os.path.basename(p))
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            fail('not_found', 'no such file or directory: %s' % rel)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(target)  # never follows symlinks inside
            kind = 'directory'
        else:
            os.unlink(target)
            kind = 'symlink' if stat.S_ISLNK(st.st_mode) else 'file'
        answer({'ok': True, 'path': show(target), 'deleted': kind})
    else:
        fail('invalid_request', 'unknown operation')
except OSError as e:
    import errno
    if e.errno == errno.EFBIG:
        fail('file_too_large', 'the file size limit of the sandbox was reached')
    if e.errno == errno.ENOSPC:
        fail('no_space', 'the workspace is full')
    fail('io_error', '%s: %s' % (rel, e.strerror))
`;
