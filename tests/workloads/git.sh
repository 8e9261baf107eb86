#!/bin/sh
# git: a repository's everyday life under $HOME, one result line per step
set -u
. "$(dirname "$0")/lib.sh"
export GIT_CONFIG_NOSYSTEM=1
step git.config sh -c 'git config --global user.email wl@example.invalid && git config --global user.name wl && git config --global init.defaultBranch main'
rm -rf "$HOME/repo" "$HOME/clone"
step git.init git init -q "$HOME/repo"
cd "$HOME/repo" || exit 1
for i in 1 2 3; do echo "v$i" >"f$i.txt"; done
step git.commit sh -c 'git add . && git commit -qm one'
step git.branch sh -c 'git checkout -qb topic && echo change >> f1.txt && git commit -qam two && git checkout -q main'
step git.merge sh -c 'echo other > f4.txt && git add f4.txt && git commit -qm three && git merge -q --no-edit topic'
step git.log sh -c 'git log --oneline --graph && git diff HEAD~1 --stat && git status --porcelain && git blame f1.txt'
step git.grep git grep -q change
step git.stash sh -c 'echo dirty >> f2.txt && git stash -q && git stash pop -q && git checkout -q -- f2.txt'
step git.clone git clone -q "$HOME/repo" "$HOME/clone"
step git.gc git gc -q
step git.fsck git fsck --no-progress
step git.archive sh -c 'git archive --format=tar.gz -o "$HOME/a.tgz" HEAD && tar -tzf "$HOME/a.tgz" | grep -q f4.txt'
step git.bisect sh -c 'git bisect start HEAD HEAD~2 >/dev/null && git bisect run sh -c "! grep -q change f1.txt" >/dev/null && git bisect reset >/dev/null'
