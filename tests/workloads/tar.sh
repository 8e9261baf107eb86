#!/bin/sh
# tar with gzip and xz (xz -T0: threads) under $HOME: create, list, extract,
# compare; one result line per step
set -u
. "$(dirname "$0")/lib.sh"
rm -rf "$HOME/t" && mkdir -p "$HOME/t/src/sub" && cd "$HOME/t" || exit 1
echo a >src/a && echo b >src/sub/b && ln -s a src/link && ln src/a src/hard && chmod 640 src/a
head -c 1000000 /dev/urandom >src/sub/blob
step tar.plain sh -c 'tar -cf t.tar src && tar -tvf t.tar >/dev/null && mkdir -p x1 && tar -xpf t.tar -C x1 && cmp src/sub/blob x1/src/sub/blob'
step tar.gzip sh -c 'tar -czf t.tgz src && mkdir -p x2 && tar -xzf t.tgz -C x2 && cmp src/sub/blob x2/src/sub/blob'
step tar.xz sh -c 'tar -cJf t.txz src && mkdir -p x3 && tar -xJf t.txz -C x3 && cmp src/sub/blob x3/src/sub/blob'
step xz.threads sh -c 'xz -T2 -k -1 src/sub/blob && xz -dc src/sub/blob.xz | cmp - src/sub/blob'
step tar.links sh -c 'test "$(readlink x1/src/link)" = a && test x1/src/a -ef x1/src/hard'
step tar.xattrs sh -c 'tar --xattrs -cf tx.tar src && tar --xattrs -tf tx.tar >/dev/null'
