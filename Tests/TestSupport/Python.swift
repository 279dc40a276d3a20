/// Functions every python script run through `TestSandbox.py` gets:
///   t(label, fn, *args): runs fn; prints "label OK[ value]" or "label ERRNAME"
///     (bytes as hex, lists sorted and comma-joined);
///   en(errno) → its name (ENOTSUP spelled EOPNOTSUPP); read(p) / write(p, data) / wfd(p, flags, data, off);
///   getx_probe(path, name, size) / listx_probe(path, size): raw getxattr/listxattr via ctypes;
///   renameat2(old, new, flags).
public let pythonPrelude = """
    import os, sys, errno, ctypes, json, signal, time
    libc = ctypes.CDLL(None, use_errno=True)
    def en(e):
        n = errno.errorcode.get(e, str(e))
        return 'EOPNOTSUPP' if n == 'ENOTSUP' else n
    def show(v):
        if v is None: return ''
        if isinstance(v, bytes): return v.hex() if len(v) <= 512 else 'bytes[%d]' % len(v)
        if isinstance(v, (list, tuple)): return ','.join(sorted(str(x) for x in v))
        return str(v)
    def t(label, fn, *a):
        try:
            v = fn(*a)
            print(label, ('OK ' + show(v)).rstrip(), flush=True)
        except OSError as e:
            print(label, en(e.errno), flush=True)
    def cerr(r):
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return r
    def getx_probe(path, name, size):
        buf = ctypes.create_string_buffer(size) if size else None
        return cerr(libc.getxattr(os.fsencode(path), name.encode(), buf, ctypes.c_size_t(size)))
    def listx_probe(path, size):
        buf = ctypes.create_string_buffer(size) if size else None
        return cerr(libc.listxattr(os.fsencode(path), buf, ctypes.c_size_t(size)))
    def renameat2(old, new, flags):
        return cerr(libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), ctypes.c_uint(flags)))
    def read(p):
        with open(p, 'rb') as f: return f.read()
    def write(p, data, mode='wb'):
        with open(p, mode) as f: f.write(data)
    def wfd(p, flags, data, off=None):
        fd = os.open(p, flags, 0o600)
        try:
            if off is None: os.write(fd, data)
            else: os.pwrite(fd, data, off)
        finally:
            os.close(fd)

    """

/// Lines `label result` of a python run (see `pythonPrelude`'s `t`) as a dictionary.
public func labelled(_ r: RunResult) -> [String: String] {
    var out: [String: String] = [:]
    for line in r.lines {
        let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
        guard let first = parts.first else { continue }
        out[first] = parts.count > 1 ? parts[1] : ""
    }
    return out
}
