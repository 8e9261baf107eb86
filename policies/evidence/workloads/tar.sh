# tar for the seccomp evidence: create, list and extract (plain, gzip, xz),
# keeping permissions and links. Prints "ok".
set -eu
cd /tmp && mkdir -p src/sub && echo a > src/a && echo b > src/sub/b
ln -s a src/link && ln src/a src/hard && chmod 640 src/a
head -c 200000 /dev/urandom > src/sub/blob
tar -cf t.tar src && tar -tvf t.tar > /dev/null
tar -czf t.tgz src && mkdir x && tar -xzf t.tgz -C x
if command -v xz > /dev/null; then tar -cJf t.txz src && tar -xJf t.txz -C x; fi
tar -xpf t.tar -C x --overwrite
cmp src/sub/blob x/src/sub/blob
gzip -k src/sub/blob && gunzip -c src/sub/blob.gz | cmp - src/sub/blob
test "$(readlink x/src/link)" = a
echo ok
