#!/usr/bin/env bash
# Makes what the power-cut test (tests/powercut/) needs available: `fusermount3`
# (Debian's `fuse3`), e2fsprogs (`mkfs.ext4`, `e2fsck`), `losetup` and a C compiler.
# Nothing to do when all are on PATH; as root (CI) installs the missing Debian packages;
# otherwise says what is missing and exits 0: the test itself then skips with a note
# (and fails with CI=true).
set -euo pipefail
missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v mkfs.ext4 >/dev/null && command -v e2fsck >/dev/null || missing+=(e2fsprogs)
command -v losetup >/dev/null || missing+=(mount)
command -v cc >/dev/null || missing+=(gcc)
[ ${#missing[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "power-cut test: missing ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
