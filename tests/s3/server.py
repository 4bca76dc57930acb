"""A real S3-compatible server for the tests and benchmarks: SeaweedFS's `weed server -s3`
(built once per machine by tests/s3/weed-build), on free loopback ports, with a folder and
an identity of its own; started, waited for, and stopped by its pid.

    with WeedServer(tmpdir) as s3:
        env = s3.env()          # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... for zephon
        s3.metric_bytes_sent()  # response bytes the S3 gateway sent (its own counter)
"""
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ACCESS_KEY = 'zephon-test-access'
SECRET_KEY = 'zephon-test-secret-0123456789abcdef'


def weed_binary():
    """The built weed (ZEPHON_WEED, else tests/s3/weed-build's cache), or None."""
    path = os.environ.get('ZEPHON_WEED')
    if path and os.access(path, os.X_OK):
        return path
    p = subprocess.run([str(HERE / 'weed-build'), '--check'], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (the kernel's picks)."""
    socks, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
        # weed also binds each port + 10000 for gRPC unless told: every port is named,
        # but keep the picks clear of each other's neighbourhood anyway
        if port not in ports and port < 55000:
            ports.append(port)
        socks.append(s)
    for s in socks:
        s.close()
    return ports


class WeedServer:
    def __init__(self, workdir, binary=None):
        self.dir = pathlib.Path(workdir)
        self.binary = binary or weed_binary()
        self.proc = None

    def start(self, timeout=60):
        if not self.binary:
            raise RuntimeError('no SeaweedFS binary: run tests/s3/weed-build')
        (self.dir / 'data').mkdir(parents=True, exist_ok=True)
        (self.dir / 's3.json').write_text(json.dumps({'identities': [{
            'name': 'tests',
            'credentials': [{'accessKey': ACCESS_KEY, 'secretKey': SECRET_KEY}],
            'actions': ['Admin', 'Read', 'List', 'Tagging', 'Write']}]}))
        p = free_ports(9)
        self.s3_port, self.metrics_port = p[6], p[8]
        self.args = [
            self.binary, 'server', '-ip=127.0.0.1', '-ip.bind=127.0.0.1',
            '-dir=%s' % (self.dir / 'data'),
            '-master.port=%d' % p[0], '-master.port.grpc=%d' % p[1],
            '-master.electionTimeout=1s', '-master.telemetry=false',
            '-master.volumeSizeLimitMB=1024', '-volume.max=0', '-volume.preStopSeconds=0',
            '-volume.port=%d' % p[2], '-volume.port.grpc=%d' % p[3],
            '-filer', '-filer.port=%d' % p[4], '-filer.port.grpc=%d' % p[5],
            '-s3', '-s3.port=%d' % p[6], '-s3.port.grpc=%d' % p[7],
            '-s3.port.iceberg=0', '-s3.port.lance=0',
            '-s3.config=%s' % (self.dir / 's3.json'), '-metricsPort=%d' % p[8]]
        self._spawn(timeout)
        return self

    def _spawn(self, timeout):
        self.log = open(self.dir / 'weed.log', 'ab')
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        (self.dir / 'weed.pid').write_text(str(self.proc.pid))
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('weed exited %d: see %s' % (self.proc.returncode,
                                                             self.dir / 'weed.log'))
            if self.answers():
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError('weed did not answer within %d s' % timeout)

    def answers(self):
        """Whether the S3 gateway answers (an anonymous request: 403 when it is up)."""
        try:
            urllib.request.urlopen(self.endpoint + '/', timeout=1)
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def restart(self, timeout=60):
        """Stop (SIGKILL) and start again on the same folder and ports."""
        self.stop()
        self._spawn(timeout)

    @property
    def endpoint(self):
        return 'http://127.0.0.1:%d' % self.s3_port

    def env(self, **extra):
        """os.environ with this server's endpoint and credentials (none from elsewhere)."""
        e = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}
        e.update(AWS_ENDPOINT_URL=self.endpoint, AWS_ACCESS_KEY_ID=ACCESS_KEY,
                 AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION='us-east-1')
        e.update(extra)
        return e

    def metric_bytes_sent(self, bucket=None):
        """SeaweedFS_s3_bucket_traffic_sent_bytes_total (summed, or of one bucket)."""
        text = urllib.request.urlopen('http://127.0.0.1:%d/metrics' % self.metrics_port,
                                      timeout=5).read().decode()
        total = 0.0
        for m in re.finditer(r'^SeaweedFS_s3_bucket_traffic_sent_bytes_total\{([^}]*)\} (\S+)$',
                             text, re.M):
            if bucket is None or 'bucket="%s"' % bucket in m.group(1):
                total += float(m.group(2))
        return int(total)

    def pause(self):
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        if self.proc:
            self.log.close()
        self.proc = None

    def __enter__(self):
        return self.start() if not self.proc else self

    def __exit__(self, *exc):
        self.stop()
