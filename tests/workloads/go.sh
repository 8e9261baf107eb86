#!/bin/sh
# Go: build go/main.go under $HOME (the compiler and linker run), then run it
# (os/exec, signals); skipped when no go is installed (Debian: golang-go)
set -u
. "$(dirname "$0")/lib.sh"
if ! command -v go >/dev/null; then
	echo "@@wl skip go.build: no go here (apt-get install golang-go)"
	exit 0
fi
export GOCACHE="$HOME/.cache/go-build" GOPATH="$HOME/go" GO111MODULE=off GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
step go.build go build -o "$HOME/wl-go" "$(dirname "$0")/go/main.go"
[ -x "$HOME/wl-go" ] && "$HOME/wl-go"
