#!/bin/bash
# The layer check (make layers; make check runs it): the module table of
# docs/ARCHITECTURE.md, encoded in tools/layers.txt, held against the code.
#   includes:   every #include "..." of src/<module>/* (src/main.c: cli) names
#               the module itself or one in its "uses", or a header named
#               there as module/header.h; moat_admin.h only
#               where allowed, and ":c" never from a header
#   implements: a module defines functions of a public header only if it
#               implements that header (nm over the built objects)
#   calls:      every function a module's objects call from another module
#               is that module's (in "uses"), or declared in a public header
#               in "uses" that the callee's module implements, or in one
#               header of the callee's module named in "uses" (module/h.h:
#               that header and no other of the module) (nm)
#   rooms:      inside each module, the files call only downward: no cycle
#               among the calls from one of its objects to another (nm).
#               A module named on a "!loops" line of the table is the one
#               exception, reported (skipped, its loop named), never silent;
#               a "!loops" module with no loop left fails (drop the line)
# The symbol checks need the objects (BUILD/obj, default build/obj); without
# them they are counted skipped. Prints
#   check-layers: N passed, M failed, S skipped
# and exits 1 when any check failed.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OBJ=$BUILD/obj
table=tools/layers.txt
pass=0; fail=0; skip=0

declare -A uses impl layer failed loopok
mods=()
while read -r m l rest; do
	case "$m" in ''|'#'*) continue ;; esac
	if [ "$m" = '!loops' ]; then loopok[$l]=1; continue; fi
	mods+=("$m"); layer[$m]=$l
	uses[$m]=" ${rest%%|*} "; impl[$m]=" $(echo "${rest#*|}") "
done < "$table"

known() { [ -n "${layer[$1]:-}" ]; }
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'check-layers: FAIL %s\n' "$*"; }

# the module of a source or object path: src/cli/run.c → cli, main → cli
mod_of() {
	local p=${1#"$OBJ"/}; p=${p#src/}
	case "$p" in main.*) echo cli ;; */*) echo "${p%%/*}" ;; *) echo "?" ;; esac
}

# ---- includes --------------------------------------------------------------
for d in src/*/; do
	m=$(basename "$d")
	known "$m" || { bad "src/$m/: a module not in $table"; continue; }
done
for m in "${mods[@]}"; do
	files=$(ls src/"$m"/*.[ch] 2>/dev/null)
	[ "$m" = cli ] && files="$files src/main.c"
	[ -n "${files// /}" ] || continue # a module to come (pool/): nothing to hold yet
	before=$fail
	for f in $files; do
		while IFS=: read -r line inc; do
			inc=${inc#*\"}; inc=${inc%%\"*}
			case "$inc" in
			moat.h|moat_admin.h)
				tok=$inc
				if [[ "${uses[$m]}" == *" $inc "* ]]; then continue; fi
				if [[ "${uses[$m]}" == *" $inc:c "* ]]; then
					[[ "$f" == *.c ]] && continue
					bad "$f:$line includes $inc: a header of $m may not (only its .c files)"
					continue
				fi
				bad "$f:$line includes $inc: $m may not use it"
				;;
			*/*)
				to=${inc%%/*}
				[ "$to" = "$m" ] && continue
				if ! known "$to"; then
					bad "$f:$line includes $inc: not a module of $table"
				elif [[ "${uses[$m]}" == *" $inc "* ]]; then
					continue # one header of the module, named in "uses"
				elif [[ "${uses[$m]}" != *" $to "* ]]; then
					bad "$f:$line includes $inc: $m (layer ${layer[$m]}) may not use $to (layer ${layer[$to]})"
				fi
				;;
			*) bad "$f:$line includes \"$inc\": name headers by module (\"$m/$inc\")" ;;
			esac
		done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
	done
	[ "$fail" -eq "$before" ] && ok
done

# ---- symbols: implements and calls ---------------------------------------------
# only the objects of sources that exist: a file moved or removed leaves its
# stale object in a build directory that was not cleaned
objs=$(for o in "$OBJ"/*/*.o "$OBJ"/main.o; do
	src=src/${o#"$OBJ"/}
	[ -f "${src%.o}.c" ] && echo "$o"
done)
if [ -z "$objs" ]; then
	skip=$((skip + 3))
	echo "check-layers: no objects in $OBJ (make first): implements, calls and rooms not checked"
else
	# one awk over one nm: the table, the public headers' functions, then
	# every object's defined and undefined global symbols
	res=$( {
		for m in "${mods[@]}"; do echo "M ${m}|${uses[$m]}|${impl[$m]}|${layer[$m]}"; done
		for m in "${!loopok[@]}"; do echo "E $m"; done
		for h in moat.h moat_admin.h; do
			grep -o '\bmoat_[a-z0-9_]*[[:space:]]*(' include/$h | tr -d '( \t' | sort -u |
				sed "s/^/P $h /"
		done
		# a module's header named alone in "uses" (module/header.h): the
		# functions and arrays it declares, comments left out
		for h in $(printf '%s\n' "${uses[@]}" | tr ' ' '\n' | grep '/.*\.h$' | sort -u); do
			gcc -fpreprocessed -dD -E -P "src/$h" 2>/dev/null |
				grep -o '\b[a-z_][a-z0-9_]*[[:space:]]*[([]' | tr -d '([ \t' | sort -u |
				sed "s|^|P $h |"
		done
		nm -A -g $objs | sed "s|^$OBJ/|S |"
	} | awk -v objs="$(echo $objs)" '
	function mod(o) { if (o ~ /^main\./) return "cli"; sub(/\/.*/, "", o); return o }
	function has(list, w) { return index(" " list " ", " " w " ") > 0 }
	$1 == "M" { split(substr($0, 3), f, "|"); m = f[1]; uses[m] = f[2]; impl[m] = f[3]
		    lay[m] = f[4]; order[++nm] = m; next }
	$1 == "P" { pub[$3] = pub[$3] " " $2; next }
	$1 == "E" { loopok[$2] = 1; next }
	$1 == "S" {
		o = $2; sub(/:.*/, "", o)
		if (NF == 4 && $3 ~ /^[TDBRV]$/) { def[$4] = mod(o); defo[$4] = o; dn++; dsym[dn] = $4; dobj[dn] = o }
		else if (NF == 3 && $2 ~ /:U$/ || $3 == "U") { un++; usym[un] = $NF; uobj[un] = o }
		next }
	END {
		for (i = 1; i <= dn; i++) {
			s = dsym[i]; m = mod(dobj[i]); n = split(pub[s], hs, " ")
			for (j = 1; j <= n; j++) if (!has(impl[m], hs[j]) && index(hs[j], m "/") != 1) {
				print "F " m " " dobj[i] ": defines " s " (" hs[j] "), which " m " does not implement"
			}
		}
		for (i = 1; i <= un; i++) {
			s = usym[i]; m = mod(uobj[i]); to = def[s]
			if (to == "" || to == m || has(uses[m], to)) continue
			ok = 0; n = split(pub[s], hs, " ")
			for (j = 1; j <= n; j++)
				if ((has(uses[m], hs[j]) || has(uses[m], hs[j] ":c")) &&
				    (has(impl[to], hs[j]) || index(hs[j], to "/") == 1)) ok = 1
			if (!ok) print "C " m " " uobj[i] ": calls " s " of " defo[s] " (" to ", layer " lay[to] "): " m " (layer " lay[m] ") may not reach it"
		}
		# rooms: the calls between the objects of one module, a graph per
		# module; peel off the files that call no other file left, and
		# what remains is a loop (or calls into one)
		for (i = 1; i <= un; i++) {
			s = usym[i]; a = uobj[i]; b = defo[s]
			if (b == "" || a == b || mod(a) != mod(b)) continue
			if (!((a, b) in edge)) { edge[a, b] = s; outs[a]++ }
			node[a] = node[b] = 1
		}
		do {
			peeled = 0
			for (a in node) if (!outs[a]) {
				delete node[a]; peeled = 1
				for (k in edge) { split(k, ab, SUBSEP); if (ab[2] == a && ab[1] in node) outs[ab[1]]-- }
			}
		} while (peeled)
		# then the files no file left calls: what remains is on a loop
		do {
			peeled = 0
			for (a in node) ins[a] = 0
			for (k in edge) { split(k, ab, SUBSEP); if ((ab[1] in node) && (ab[2] in node)) ins[ab[2]]++ }
			for (a in node) if (!ins[a]) { delete node[a]; peeled = 1 }
		} while (peeled)
		ne = 0
		for (k in edge) {
			split(k, ab, SUBSEP)
			if ((ab[1] in node) && (ab[2] in node)) {
				e = ab[1] "->" ab[2] "(" edge[k] ")"
				for (j = ++ne; j > 1 && el[j - 1] > e; j--) el[j] = el[j - 1]
				el[j] = e
			}
		}
		for (j = 1; j <= ne; j++) { m = mod(el[j]); loop[m] = loop[m] " " el[j] }
		for (i = 1; i <= nm; i++) {
			m = order[i]
			if (loop[m] != "" && loopok[m]) print "X " m " " m "/: files calling each other, left to do (tools/layers.txt !loops):" loop[m]
			else if (loop[m] != "") print "L " m " " m "/: files calling each other (move what they share to a lower file):" loop[m]
			else if (loopok[m]) print "Y " m " " m "/: named on a !loops line of tools/layers.txt but has no loop left: drop the line"
		}
		for (i = 1; i <= nm; i++) print "H " order[i]
	}')
	while read -r kind m msg; do
		case "$kind" in
		F|C|L|Y) bad "$msg"; failed["$kind$m"]=1 ;;
		X) skip=$((skip + 1)); echo "check-layers: SKIP $msg"; failed["X$m"]=1 ;;
		H)
			ls "$OBJ/$m"/*.o >/dev/null 2>&1 || continue
			[ -n "${failed[F$m]:-}" ] || ok
			[ -n "${failed[C$m]:-}" ] || ok
			[ -n "${failed[L$m]:-}${failed[Y$m]:-}${failed[X$m]:-}" ] || ok
			;;
		esac
	done <<< "$res"
fi

echo "check-layers: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
