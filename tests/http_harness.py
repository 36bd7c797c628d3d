"""HTTP helpers shared by the Python end-to-end tests (serve/, track/): one request through
urllib, and a raw request written to a socket as is (for malformed and hostile input)."""
import socket
import urllib.error
import urllib.request


def http(url, token=None, method="GET"):
    """(status, body) of one request; a bearer token if given. HTTP errors are answers too."""
    req = urllib.request.Request(url, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def raw(port, data):
    """Sends `data` to 127.0.0.1:port as is, closes the writing side and returns all that the
    server answered (latin-1) until it closed the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = b""
    try:  # the server may answer (431) and close before it has read everything
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    except OSError:
        pass
    s.close()
    return buf.decode("latin-1")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
