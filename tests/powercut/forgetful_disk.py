"""A disk that forgets: a FUSE filesystem with one file, `disk.img`, whose writes are
pending until an fsync/fdatasync of it, as a drive's volatile write cache holds them
until a cache flush.

    python forgetful_disk.py BACKING MOUNTPOINT

`BACKING` (a regular file, fixed size) is the durable state: a write is kept in memory,
page by page (4 KiB), and reads see it, but it reaches `BACKING` only when `disk.img` is
fsynced. A loop device attached to `MOUNTPOINT/disk.img` in buffered mode turns every
flush and FUA write of the block device (ext4's journal barriers, `syncfs(2)`, `fsync(2)`
of any file on it) into an fsync of `disk.img`, so `BACKING` is what a disk keeps after
power loss.

Commands, one a line on stdin, each answered by one line on stdout:

- `cut IMAGE POLICY SEED`: writes a crash image to `IMAGE`: the durable state, plus with
  `POLICY` = `none` no pending page, with `subset` each pending page with probability
  1/2 (a drive cache that reordered writes within one flush interval), drawn from
  `random.Random(SEED)`. Taken atomically with respect to the filesystem's operations.
  Answers `ok pending=N kept=M syncs=S`.
- `arm K IMAGE POLICY SEED`: the same cut, taken by the disk itself just before the
  K-th write from now reaches it (so inside a flush interval, typically in the middle of
  a sync); from then on every write and fsync blocks until `release`, so nothing
  becomes durable after the image. Answers `ok`.
- `wait SECONDS`: waits for the armed cut; answers its `ok pending=...` line, or, if it
  has not happened in time, disarms and answers `ok none`.
- `release`: lets the blocked writes and fsyncs go on. Answers `ok`.
- `stats`: answers `ok pending=N syncs=S`.

Runs in the foreground until `MOUNTPOINT` is unmounted (`fusermount3 -u`).
"""

import errno
import os
import random
import stat
import sys
import threading
import time

import mfusepy as fuse

PAGE = 4096
NAME = "/disk.img"


class ForgetfulDisk(fuse.Operations):
    use_ns = True

    def __init__(self, backing):
        self.mutex = threading.Condition()
        # An armed cut: [writes left, image, policy, seed]; its answer once taken.
        self.armed = None
        self.armed_answer = None
        # After an armed cut: writes and fsyncs wait until released.
        self.frozen = False
        self.fd = os.open(backing, os.O_RDWR)
        self.size = os.fstat(self.fd).st_size
        if self.size % PAGE:
            raise SystemExit(f"{backing}: size {self.size} is not a multiple of {PAGE}")
        # page number -> bytearray(PAGE): written since the last fsync.
        self.pending = {}
        self.syncs = 0
        self.now = time.time_ns()  # use_ns: timestamps in nanoseconds

    # --- the durable and the pending state ---

    def _page(self, n):
        page = self.pending.get(n)
        if page is None:
            page = bytearray(os.pread(self.fd, PAGE, n * PAGE).ljust(PAGE, b"\0"))
            self.pending[n] = page
        return page

    def _flush(self):
        for n in sorted(self.pending):
            os.pwrite(self.fd, self.pending[n], n * PAGE)
        self.pending.clear()
        self.syncs += 1

    def cut(self, image, policy, seed):
        with self.mutex:
            return self._cut(image, policy, seed)

    def _cut(self, image, policy, seed):
        """The crash image of this instant; call with `mutex` held."""
        if policy not in ("none", "subset"):
            raise ValueError(f"unknown policy {policy!r}")
        rng = random.Random(seed)
        copy_sparse(self.fd, self.size, image)
        kept = 0
        if policy == "subset":
            out = os.open(image, os.O_WRONLY)
            try:
                for n in sorted(self.pending):
                    if rng.random() < 0.5:
                        os.pwrite(out, self.pending[n], n * PAGE)
                        kept += 1
            finally:
                os.close(out)
        return f"ok pending={len(self.pending)} kept={kept} syncs={self.syncs}"

    def arm(self, writes, image, policy, seed):
        with self.mutex:
            self.armed = [writes, image, policy, seed]
            self.armed_answer = None

    def wait_armed(self, seconds):
        with self.mutex:
            self.mutex.wait_for(lambda: self.armed_answer is not None, timeout=seconds)
            answer, self.armed_answer, self.armed = self.armed_answer, None, None
            return answer or "ok none"

    def thaw(self):
        with self.mutex:
            self.frozen = False
            self.mutex.notify_all()

    def _before_change(self, is_write):
        """Takes an armed cut due now; then waits while frozen. Call with `mutex` held."""
        if is_write and self.armed is not None and self.armed_answer is None:
            self.armed[0] -= 1
            if self.armed[0] <= 0:
                self.armed_answer = self._cut(*self.armed[1:])
                self.frozen = True
                self.mutex.notify_all()
        self.mutex.wait_for(lambda: not self.frozen)

    # --- FUSE operations ---

    def getattr(self, path, fh=None):
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2,
                    "st_atime": self.now, "st_mtime": self.now, "st_ctime": self.now}
        if path == NAME:
            return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": self.size,
                    "st_atime": self.now, "st_mtime": self.now, "st_ctime": self.now}
        raise fuse.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", NAME[1:]]

    def open(self, path, flags):
        if path != NAME:
            raise fuse.FuseOSError(errno.ENOENT)
        return 0

    def read(self, path, size, offset, fh):
        with self.mutex:
            size = max(0, min(size, self.size - offset))
            out = bytearray()
            while size > 0:
                n, within = divmod(offset, PAGE)
                take = min(size, PAGE - within)
                page = self.pending.get(n)
                if page is not None:
                    out += page[within:within + take]
                else:
                    out += os.pread(self.fd, take, offset)
                offset += take
                size -= take
            return bytes(out)

    def write(self, path, data, offset, fh):
        with self.mutex:
            self._before_change(True)
            if offset + len(data) > self.size:
                raise fuse.FuseOSError(errno.ENOSPC)
            done = 0
            while done < len(data):
                n, within = divmod(offset + done, PAGE)
                take = min(len(data) - done, PAGE - within)
                self._page(n)[within:within + take] = data[done:done + take]
                done += take
            return len(data)

    def fsync(self, path, datasync, fh):
        with self.mutex:
            self._before_change(False)
            self._flush()
        return 0

    def truncate(self, path, length, fh=None):
        if length != self.size:
            raise fuse.FuseOSError(errno.EPERM)
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return 0

    def statfs(self, path):
        return {"f_bsize": PAGE, "f_frsize": PAGE, "f_blocks": self.size // PAGE,
                "f_bfree": 0, "f_bavail": 0, "f_namemax": 255}


def copy_sparse(fd, size, image):
    """Copies `size` bytes of `fd` to a new file `image`, leaving its holes holes."""
    out = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(out, size)
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            while start < end:
                chunk = os.pread(fd, min(end - start, 1 << 20), start)
                os.pwrite(out, chunk, start)
                start += len(chunk)
            offset = end
    finally:
        os.close(out)


def serve_commands(disk):
    for line in sys.stdin:
        words = line.split()
        try:
            if words and words[0] == "cut" and len(words) == 4:
                answer = disk.cut(words[1], words[2], int(words[3]))
            elif words and words[0] == "arm" and len(words) == 5:
                disk.arm(int(words[1]), words[2], words[3], int(words[4]))
                answer = "ok"
            elif words and words[0] == "wait" and len(words) == 2:
                answer = disk.wait_armed(float(words[1]))
            elif words == ["release"]:
                disk.thaw()
                answer = "ok"
            elif words == ["stats"]:
                with disk.mutex:
                    answer = f"ok pending={len(disk.pending)} syncs={disk.syncs}"
            else:
                answer = f"error unknown command {line.strip()!r}"
        except Exception as e:  # answered, so the test sees it
            answer = f"error {e!r}"
        print(answer, flush=True)


def main():
    backing, mountpoint = sys.argv[1], sys.argv[2]
    disk = ForgetfulDisk(backing)
    threading.Thread(target=serve_commands, args=(disk,), daemon=True).start()
    fuse.FUSE(disk, mountpoint, foreground=True, nothreads=False, fsname="forgetful")


if __name__ == "__main__":
    main()
