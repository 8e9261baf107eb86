# bash completion for moat(1); installed as
# $(PREFIX)/share/bash-completion/completions/moat

_moat()
{
	local cur prev cmd i
	COMPREPLY=()
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	cmd=
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		-*) ;;
		*) cmd=${COMP_WORDS[i]}; break ;;
		esac
	done
	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W 'run exec serve kv mcp doctor policy version help' -- "$cur"))
		return
	fi

	# moat run ... -- CMD ARG...: a command, then its arguments (files)
	if [[ $cmd == run ]]; then
		local k
		for ((k = i + 1; k < COMP_CWORD; k++)); do
			if [[ ${COMP_WORDS[k]} == -- ]]; then
				if ((COMP_CWORD == k + 1)); then
					COMPREPLY=($(compgen -c -- "$cur"))
				else
					COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null
				fi
				return
			fi
		done
	fi

	# options that take a file, a directory or a word
	case $prev in
	--policy|--config|--token-file|--stdin|--socket|--kv)
		COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null
		return ;;
	--rootfs|--runtime|--workdir)
		COMPREPLY=($(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null
		return ;;
	--socket-group)
		COMPREPLY=($(compgen -g -- "$cur"))
		return ;;
	-l|--language)
		COMPREPLY=($(compgen -W 'python javascript typescript bash sh' -- "$cur"))
		return ;;
	--provider)
		COMPREPLY=($(compgen -W 'native docker e2b daytona none' -- "$cur"))
		return ;;
	--file)
		# DEST=SRC: complete the host file after the '='
		if [[ $cur == *=* ]]; then
			local dest=${cur%%=*}
			COMPREPLY=($(compgen -f -P "$dest=" -- "${cur#*=}"))
			compopt -o filenames 2>/dev/null
		fi
		return ;;
	-c|--code|--timeout|--memory|--cpus|--pids|--env|--max-output|--listen|\
	--metrics-listen|--max-relays|--max-dns|--max-sessions|--max-sandboxes|\
	--max-concurrent|--queue|--grace|--client-timeout|--kv-quota|--pool|--output|\
	--allowed-host|--sandbox-id|--max-queued|--url)
		return ;;
	esac

	case $cmd in
	run)
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W '-l --language -c --code --timeout --memory --cpus
				--pids --strict-limits --env --file --stdin --max-output --net --policy
				--seccomp-log --strict-isolation --rootfs --workdir --output --provider
				--config --json --help --' -- "$cur"))
		else
			COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null
		fi ;;
	exec)
		COMPREPLY=($(compgen -W '--provider --config --policy --seccomp-log
			--strict-isolation --rootfs --kv --kv-quota --runtime --stream' -- "$cur")) ;;
	serve)
		COMPREPLY=($(compgen -W '--listen --socket --socket-group --token-file --no-auth
			--metrics-listen --max-concurrent --max-relays --max-dns --max-sessions --max-sandboxes --queue
			--config --rootfs --runtime --grace --client-timeout --kv --kv-quota --no-kv
			--pool --pool-zygote --no-pool-zygote --pool-zygote-max-children
			--pool-zygote-max-age --json-log --help' -- "$cur")) ;;
	mcp)
		COMPREPLY=($(compgen -W '--config --timeout --memory --cpus --pids --max-output
			--strict-limits --net --allowed-host --sandbox-id --kv-enabled --max-concurrent
			--max-queued --url --socket --token-file --session --policy --rootfs --kv --kv-quota
			--strict-isolation --help' -- "$cur")) ;;
	kv)
		local sub= j
		for ((j = i + 1; j < COMP_CWORD; j++)); do
			case ${COMP_WORDS[j]} in
			--kv|--config) ((j++)) ;;
			-*) ;;
			*) sub=${COMP_WORDS[j]}; break ;;
			esac
		done
		if [[ -z $sub ]]; then
			COMPREPLY=($(compgen -W 'list get export clear --kv --config --help' -- "$cur"))
		fi ;;
	policy)
		if ((COMP_CWORD == i + 1)); then
			COMPREPLY=($(compgen -W 'check show' -- "$cur"))
		else
			COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null
		fi ;;
	esac
}
complete -F _moat moat
