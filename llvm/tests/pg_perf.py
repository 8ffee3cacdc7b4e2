# SPDX-License-Identifier: MIT
"""PostgreSQL 15's JIT (Debian's llvmjit.so, LLVM 14) through jitring.

Usage: pg_perf.py BUILD_DIR [LLVM_VERSION]
LLVM_VERSION: the LLVM the build used; the test skips unless it is the
one llvmjit.so links (the interposer must match it).
A scratch cluster (initdb as the postgres user: the server refuses root),
a server on a Unix socket only, jit=on, jit_above_cost=0,
jit_profiling_support=on, and libjitring-llvm-perf.so preloaded with
JITRING_DIR pointing at a scratch folder.  An expression-heavy aggregate
runs in one backend under perf record --call-graph dwarf -p <backend>:
perf names evalexpr_* with executor frames above them; the result equals
the one with jit=off; after the server stops, every dump passes
jitring-dump --check --sorted.  The server is stopped whatever happens.
"""
import glob
import os
import pwd
import re
import select
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llvmtest import guarded, run, perf_usable, dump_records, dump_loads, \
    perf_samples

PGBIN = '/usr/lib/postgresql/15/bin'
ROWS = 1000000
QUERY = ('SELECT sum(a * 3 + b), avg(b - a * 2), '
         'count(*) FILTER (WHERE a %% 3 = 0 AND b > 500), '
         'max(abs(g - %d) + b %% 17), sum(CASE WHEN a < 50 THEN g ELSE -g END) '
         'FROM t' % (ROWS // 2))
# CPU time the backend spends on the query under perf (seconds), and the
# most runs of it (a guard: one run takes a tenth of CPU_S here).  JIT
# code takes about an eighth of that time: about 200 samples, of which
# MIN_JIT must be there.
CPU_S = 1.5
MAX_RUNS = 100
MIN_JIT = 100
# Executor frames that run compiled expressions.
EXECUTOR_RE = re.compile(r'^(Exec|agg_|advance_|fetch_input_tuple|'
                         r'standard_ExecutorRun|PortalRun)')


def cpu_seconds(pid):
    """User plus system CPU time of process pid, in seconds."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    # utime and stime: fields 14 and 15 of proc(5), counted after the
    # command name (fields 1 and 2).
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


class Psql:
    """One psql session (so one backend) fed query by query."""

    def __init__(self, sock, env):
        self.p = subprocess.Popen(
            ['runuser', '-u', 'postgres', '--', PGBIN + '/psql', '-X', '-q',
             '-At', '-v', 'ON_ERROR_STOP=1', '-h', sock, '-U', 'postgres',
             '-d', 'postgres'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)

    def query(self, sql):
        """Runs sql; returns its output lines (up to a marker line)."""
        self.p.stdin.write(sql.rstrip(';') + ';\n\\echo __done__\n')
        self.p.stdin.flush()
        out = []
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError('psql ended: ' + ''.join(out))
            if line.strip() == '__done__':
                return out
            out.append(line.rstrip('\n'))

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=60)


def main(t):
    if len(sys.argv) not in (2, 3):
        print('usage: pg_perf.py BUILD_DIR [LLVM_VERSION]', file=sys.stderr)
        sys.exit(2)
    build = os.path.abspath(sys.argv[1])
    preload = os.path.join(build, 'llvm', 'libjitring-llvm-perf.so')
    dumptool = os.path.join(build, 'tools', 'jitring-dump')
    if not os.path.exists(preload):
        t.fatal('not built: ' + preload)
    for prog in ('initdb', 'pg_ctl', 'postgres', 'psql'):
        if not os.access(os.path.join(PGBIN, prog), os.X_OK):
            t.skip('PostgreSQL 15 not installed (Debian: postgresql-15)')
    if not os.path.exists('/usr/lib/postgresql/15/lib/llvmjit.so'):
        t.skip('PostgreSQL 15 has no llvmjit.so here')
    with open('/usr/lib/postgresql/15/lib/llvmjit.so', 'rb') as f:
        m = re.search(rb'libLLVM-(\d+)', f.read())
    pg_llvm = m.group(1).decode() if m else '?'
    if len(sys.argv) == 3 and sys.argv[2].split('.')[0] != pg_llvm:
        t.skip('this build is against LLVM %s; PostgreSQL 15\'s llvmjit.so '
               'uses LLVM %s' % (sys.argv[2], pg_llvm))
    if os.getuid() != 0:
        t.skip('needs root: the server runs as the postgres user')
    try:
        pw = pwd.getpwnam('postgres')
    except KeyError:
        t.skip('no postgres user (made by the postgresql-common package)')

    scratch = t.make_scratch()
    perf_usable(t, scratch)
    data_dir = os.path.join(scratch, 'data')
    sock = os.path.join(scratch, 'sock')
    dumps = os.path.join(scratch, 'dumps')
    for d in (sock, dumps):
        os.mkdir(d)
    for d in (scratch, sock, dumps):
        os.chown(d, pw.pw_uid, pw.pw_gid)
    # The postgres user must reach the preloaded libraries.
    libdir = os.path.join(scratch, 'lib')
    os.mkdir(libdir)
    # The preloaded shim dlopens the listener built for the server's LLVM
    # from its own folder.
    backends = glob.glob(os.path.join(build, 'llvm',
                                      'libjitring-llvm-perf-*.so'))
    for f in [preload, os.path.join(build, 'src', 'libjitring.so.0')] + \
            backends:
        shutil.copy(f, libdir, follow_symlinks=True)
    os.chmod(libdir, 0o755)

    env = dict(os.environ, LC_ALL='C', PGTZ='UTC')
    r = run(['runuser', '-u', 'postgres', '--', PGBIN + '/initdb', '-D',
             data_dir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E',
             'UTF8'], env=env)
    if r.returncode != 0:
        t.fatal('initdb: ' + r.stdout[-1000:] + r.stderr[-1000:])

    opts = ("-c listen_addresses='' -c unix_socket_directories=%s "
            "-c jit=on -c jit_above_cost=0 -c jit_inline_above_cost=0 "
            "-c jit_optimize_above_cost=0 -c jit_profiling_support=on "
            "-c max_parallel_workers_per_gather=0 -c fsync=off" % sock)
    server_env = dict(env, LD_PRELOAD=os.path.join(
        libdir, 'libjitring-llvm-perf.so'), LD_LIBRARY_PATH=libdir,
        JITRING_DIR=dumps)
    log = os.path.join(scratch, 'server.log')
    r = run(['runuser', '-u', 'postgres', '--', PGBIN + '/pg_ctl', '-D',
             data_dir, '-l', log, '-w', '-t', '120', '-o', opts, 'start'],
            env=server_env)

    def stop_server():
        for mode in ('fast', 'immediate'):
            r = run(['runuser', '-u', 'postgres', '--', PGBIN + '/pg_ctl',
                     '-D', data_dir, '-w', '-t', '60', '-m', mode, 'stop'],
                    env=env)
            if r.returncode == 0 or 'is the server running' in r.stderr:
                return
    t.cleanups.append(stop_server)
    if r.returncode != 0:
        t.fatal('pg_ctl start: %s %s' % (r.stdout[-1000:],
                                         open(log).read()[-2000:]))
    t.check(True, 'server up on a Unix socket only, libjitring-llvm-perf.so '
            'preloaded')

    psql = Psql(sock, env)
    t.cleanups.append(psql.close)
    psql.query('SET jit = off')
    psql.query('CREATE TABLE t AS SELECT g, g %% 100 AS a, (g * 7) %% 1000 '
               'AS b FROM generate_series(1, %d) g' % ROWS)
    psql.query('VACUUM ANALYZE t')
    expect = psql.query(QUERY)
    pid = int(psql.query('SELECT pg_backend_pid()')[0])

    # perf attached to that backend, enabled before the query (ack).
    ctl = os.path.join(scratch, 'perf.ctl')
    ack = os.path.join(scratch, 'perf.ack')
    os.mkfifo(ctl)
    os.mkfifo(ack)
    pdata = os.path.join(scratch, 'pg.data')
    perf = subprocess.Popen(
        ['perf', 'record', '-q', '-k', '1', '-e', 'cpu-clock', '-F', '999',
         '--call-graph', 'dwarf', '-D', '-1', '--control',
         'fifo:%s,%s' % (ctl, ack), '-p', str(pid), '-o', pdata],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop_perf():
        if perf.poll() is None:
            perf.terminate()
            perf.wait(timeout=120)
    t.cleanups.append(stop_perf)
    ctl_fd = os.open(ctl, os.O_WRONLY)
    ack_fd = os.open(ack, os.O_RDONLY)
    os.write(ctl_fd, b'enable\n')
    ready, _, _ = select.select([ack_fd], [], [], 60)
    if not ready or not os.read(ack_fd, 16).startswith(b'ack'):
        t.fatal('perf record did not acknowledge enable')

    psql.query('SET jit = on')
    got = []
    start = cpu_seconds(pid)
    while len(got) < MAX_RUNS and (not got or
                                   cpu_seconds(pid) - start < CPU_S):
        got.append(psql.query(QUERY))
    used = cpu_seconds(pid) - start
    os.write(ctl_fd, b'disable\n')
    select.select([ack_fd], [], [], 60) and os.read(ack_fd, 16)
    os.write(ctl_fd, b'stop\n')
    os.close(ctl_fd)
    os.close(ack_fd)
    try:
        perf.wait(timeout=120)
    except subprocess.TimeoutExpired:
        perf.terminate()
        perf.wait(timeout=60)
    t.check(perf.returncode == 0, 'perf record -p %d exited %s %s' %
            (pid, perf.returncode, perf.stderr.read()[-500:]))
    t.check(used >= CPU_S, 'the backend ran the query %d times, %.2f s of '
            'CPU time (%.1f s wanted)' % (len(got), used, CPU_S))
    t.check(got == [expect] * len(got) and len(expect) == 1,
            'results with jit=on equal jit=off (%s)' % expect)

    psql.close()
    stop_server()
    t.cleanups.remove(stop_server)

    files = sorted(glob.glob(os.path.join(dumps, 'jit-*.dump')))
    mine = os.path.join(dumps, 'jit-%d.dump' % pid)
    t.check(mine in files, 'the backend wrote %s' % os.path.basename(mine))
    bad = []
    for f in files:
        ok, out = dump_records(dumptool, f)
        if not ok:
            bad.append(out)
    t.check(files and not bad, 'after the server stopped, all %d dumps pass '
            'jitring-dump --check --sorted%s' %
            (len(files), '' if not bad else ':\n' + '\n'.join(bad)))
    if mine in files:
        loads = dump_loads(dumptool, mine)
        ev = [n for n, _, _ in loads if n.startswith('evalexpr_')]
        t.check(ev and all(u for _, u, _ in loads),
                'the backend\'s dump: %d CODE_LOADs, %d evalexpr_*, every one '
                'with UNWINDING_INFO' % (len(loads), len(ev)))

    jdata = os.path.join(scratch, 'pg.jit.data')
    r = run(['perf', 'inject', '--jit', '-i', pdata, '-o', jdata])
    t.check(r.returncode == 0, 'perf inject --jit')
    samples = perf_samples(jdata)
    jit = [s for s in samples if re.match(r'(evalexpr|deform)_', s[0][0])]
    unnamed = [s for s in samples if 'jitted-' in s[0][1] and
               not re.match(r'(evalexpr|deform)_', s[0][0])]
    # The frame above is PostgreSQL's (ExecAgg and its helpers are static:
    # no symbol in Debian's stripped binary), and an executor entry point
    # is further up.
    above = [s for s in jit if len(s) > 1 and
             s[1][1].endswith('/postgres') and
             any(EXECUTOR_RE.match(f[0]) for f in s[1:])]
    print('pg: %d samples, %d in JIT code (evalexpr_*/deform_*), %d of them '
          'called from postgres with an executor frame above, %d unnamed '
          'JIT samples' %
          (len(samples), len(jit), len(above), len(unnamed)))
    if jit:
        s = max(jit, key=len)
        print('a JIT sample\'s chain: ' +
              ' <- '.join(f[0] for f in s[:12]))
    t.check(len(jit) >= MIN_JIT and not unnamed,
            'perf names the JIT code (%d samples, at least %d; %d unnamed)' %
            (len(jit), MIN_JIT, len(unnamed)))
    t.check(len(above) >= 0.9 * len(jit),
            'executor callers above >= 90%% of JIT samples (%d of %d)' %
            (len(above), len(jit)))
    t.done()


if __name__ == '__main__':
    guarded('pg_perf', main)
