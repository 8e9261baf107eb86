# bash with coreutils for the seccomp evidence: the commands model-written
# shell scripts use, in pipelines, with a few bash built-in features. Prints "ok".
set -euo pipefail
cd "$(mktemp -d)"
for i in $(seq 1 200); do echo "line $i $((i * 7 % 13))"; done > data.txt
{ sort -k3 -n data.txt | uniq -c || true; } | head -n 5 > /dev/null
cut -d' ' -f2 data.txt | paste -sd+ | bc > sum.txt 2>/dev/null || awk '{s+=$2} END {print s}' data.txt > sum.txt
grep -c 'line 1' data.txt > /dev/null
sed -n '1,10p' data.txt | tr 'a-z' 'A-Z' | rev | wc -c > /dev/null
awk '{a[$3]++} END {for (k in a) n++; print n}' data.txt > /dev/null
mkdir -p a/b/c && touch a/b/c/f1 a/b/f2 && ln -s ../f2 a/b/c/l
find . -type f -name 'f*' | xargs -r ls -la > /dev/null
cp -r a a2 && mv a2 a3 && rm -rf a3
chmod 700 a && stat -c '%a %s' data.txt > /dev/null
sha256sum data.txt | cut -c1-64 > /dev/null
md5sum data.txt base64 2>/dev/null | head -1 > /dev/null || true
base64 data.txt | base64 -d | cmp - data.txt
du -sh . > /dev/null
df -h . > /dev/null 2>&1 || true
date +%s > /dev/null; date -u -d @0 > /dev/null
env | sort > /dev/null; id > /dev/null; uname -a > /dev/null; whoami > /dev/null 2>&1 || true
nproc > /dev/null; hostname > /dev/null 2>&1 || true
split -l 50 data.txt part. && cat part.* | cmp - data.txt
tee copy.txt < data.txt > /dev/null && diff -q copy.txt data.txt
printf '%s\n' "${BASH_VERSION}" > /dev/null
arr=(x y z); declare -A m=([k]=v); [[ ${#arr[@]} -eq 3 && ${m[k]} == v ]]
( sleep 0.1 & wait )
timeout 5 sleep 0.1
coproc cat; echo hi >&"${COPROC[1]}"; read -r l <&"${COPROC[0]}"; kill "$COPROC_PID"
trap 'true' USR1; kill -USR1 $$
exec 3> fd3.txt; echo x >&3; exec 3>&-
read -r first < data.txt
mkfifo pipe; (echo through > pipe &); read -r t < pipe; [[ $t == through ]]
{ yes || true; } | head -n 1000 | wc -l > /dev/null
{ seq 1 100000 | sort -rn || true; } | head -1 > /dev/null
realpath . > /dev/null; readlink -f a/b/c/l > /dev/null; basename "$PWD" > /dev/null
truncate -s 1M sparse && test "$(stat -c %s sparse)" = 1048576
sleep 0.01
echo ok
