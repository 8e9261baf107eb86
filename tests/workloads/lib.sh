# shellcheck shell=sh
# sourced by the shell workloads: step NAME CMD... runs CMD, prints its
# result line and keeps its output for the failure's reason (README.md)
step() {
	_name=$1
	shift
	if "$@" >"$HOME/.step.log" 2>&1; then
		echo "@@wl ok $_name"
	else
		echo "@@wl fail $_name: exit $?: $(tail -n 3 "$HOME/.step.log" | tr '\n' ' ' | cut -c1-300)"
		cat "$HOME/.step.log" >&2
	fi
}
