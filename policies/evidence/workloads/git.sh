# git for the seccomp evidence: a repository's everyday life (init, commit,
# branch, merge, diff, log, a local clone, gc, archive). Prints "ok".
set -eu
export HOME=/tmp/home; mkdir -p "$HOME"
git config --global user.email ev@example.invalid
git config --global user.name ev
git config --global init.defaultBranch main
cd /tmp && git init -q repo && cd repo
for i in 1 2 3; do echo "v$i" > "f$i.txt"; done
git add . && git commit -qm one
git checkout -qb topic && echo change >> f1.txt && git commit -qam two
git checkout -q main && echo other > f4.txt && git add f4.txt && git commit -qm three
git merge -q --no-edit topic
git diff HEAD~1 --stat > /dev/null
git log --oneline --graph > /dev/null
git status --porcelain > /dev/null
git stash list > /dev/null
git tag v1
git grep -q v2
git blame f1.txt > /dev/null
cd /tmp && git clone -q repo clone && cd clone && git log -1 --format=%s > /dev/null
git gc -q
git fsck --no-progress 2>/dev/null
git archive --format=tar.gz -o /tmp/a.tgz HEAD
echo ok
