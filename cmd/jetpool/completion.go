package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// completionShells are the shells `jetpool completion` writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

func cmdCompletion(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "completion", "bash|zsh|fish",
		"Print a shell completion script (commands, subcommands, flags; file names for arguments and flag values):\n"+
			"  bash:  source <(jetpool completion bash)     (or save it as ~/.local/share/bash-completion/completions/jetpool)\n"+
			"  zsh:   source <(jetpool completion zsh)      (after compinit; or save it as _jetpool in a directory of $fpath)\n"+
			"  fish:  jetpool completion fish > ~/.config/fish/completions/jetpool.fish")
	if e.describe != nil {
		e.describe.words = completionShells
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("want one shell: %s", strings.Join(completionShells, ", "))
	}
	root := &cmdSpec{name: "jetpool"}
	for _, c := range e.commands {
		root.subs = append(root.subs, describe(ctx, e, c))
	}
	switch pos[0] {
	case "bash":
		writeBash(e.stdout, root)
	case "zsh":
		writeZsh(e.stdout, root)
	case "fish":
		writeFish(e.stdout, root)
	default:
		return usageErr("unknown shell %q: want %s", pos[0], strings.Join(completionShells, ", "))
	}
	return nil
}

// completionNode is one place on a command line the scripts complete at:
// the path of words that led there ("", "run", "dlq list"), the words
// offered there, and its flags.
type completionNode struct {
	path  string
	words []word
	flags []word
	value []string // flags that take a value (then the shell completes file names)
}

type word struct{ name, help string }

// completionNodes flattens the command tree: the root, each command, each subcommand.
func completionNodes(root *cmdSpec) []completionNode {
	var out []completionNode
	var walk func(path string, s *cmdSpec)
	walk = func(path string, s *cmdSpec) {
		n := completionNode{path: path}
		for _, sub := range s.subs {
			n.words = append(n.words, word{sub.name, sub.summary})
		}
		for _, w := range s.words {
			n.words = append(n.words, word{w, ""})
		}
		if s.flags != nil {
			s.flags.VisitAll(func(f *flag.Flag) {
				_, help := flag.UnquoteUsage(f)
				n.flags = append(n.flags, word{"--" + f.Name, help})
				if valueFlag(f) {
					n.value = append(n.value, "--"+f.Name, "-"+f.Name)
				}
			})
		}
		if path == "" {
			n.flags = append(n.flags, word{"--help", "show help"}, word{"--version", "print the version"})
		} else {
			n.flags = append(n.flags, word{"--help", "show help"})
		}
		out = append(out, n)
		for _, sub := range s.subs {
			walk(strings.TrimSpace(path+" "+sub.name), sub)
		}
	}
	walk("", root)
	return out
}

// transitions are, per command with subcommands, the words that lead on
// to a subcommand: the scripts follow them to find where the cursor is.
func transitions(root *cmdSpec) map[string][]string {
	t := map[string][]string{}
	for _, c := range root.subs {
		for _, s := range c.subs {
			t[c.name] = append(t[c.name], s.name)
		}
	}
	return t
}

// writeFollow writes the body of the bash and zsh scripts' loop over the
// words before the cursor: it follows $w from the command to its
// subcommand in $cmdpath, skipping flags.
func writeFollow(w io.Writer, root *cmdSpec) {
	fmt.Fprint(w, `        [[ $w == -* ]] && continue
        case "$cmdpath" in
        "") cmdpath=$w ;;
`)
	for _, c := range root.subs {
		if subs := transitions(root)[c.name]; len(subs) > 0 {
			fmt.Fprintf(w, "        %s) case $w in %s) cmdpath=\"%s $w\" ;; esac ;;\n", c.name, strings.Join(subs, "|"), c.name)
		}
	}
	fmt.Fprint(w, "        esac\n")
}

func names(ws []word) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = w.name
	}
	return strings.Join(s, " ")
}

// oneLine is a description for a completion menu: its first line, short.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > 70 {
		s = string(r[:69]) + "…"
	}
	return s
}

func writeBash(w io.Writer, root *cmdSpec) {
	fmt.Fprint(w, `# bash completion for jetpool, written by 'jetpool completion bash':
#   source <(jetpool completion bash)
# or save it as ~/.local/share/bash-completion/completions/jetpool

_jetpool() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=
    ((COMP_CWORD > 1)) && prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmdpath= w i
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
`)
	writeFollow(w, root)
	fmt.Fprint(w, `    done
    local words= flags= values=
    case "$cmdpath" in
`)
	for _, n := range completionNodes(root) {
		fmt.Fprintf(w, "    %q) words=%q flags=%q values=%q ;;\n", n.path, names(n.words), names(n.flags), strings.Join(n.value, " "))
	}
	fmt.Fprint(w, `    esac
    # A flag's value, or an argument that is no fixed word: the shell's own
    # completion (file names), from -o default.
    [[ -n $prev && " $values " == *" $prev "* ]] && return 0
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
    return 0
}
complete -o default -F _jetpool jetpool
`)
}

// zshQuote quotes s for a single-quoted zsh string; a colon would end the
// name part of a _describe entry.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func zshEntries(ws []word) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = zshQuote(strings.ReplaceAll(w.name, ":", `\:`) + ":" + oneLine(w.help))
	}
	return strings.Join(s, " ")
}

func writeZsh(w io.Writer, root *cmdSpec) {
	fmt.Fprint(w, `#compdef jetpool
# zsh completion for jetpool, written by 'jetpool completion zsh':
#   source <(jetpool completion zsh)      (after compinit)
# or save it as _jetpool in a directory of $fpath
compdef _jetpool jetpool

_jetpool() {
    local cmdpath= w i prev=${words[CURRENT-1]}
    local -a opts flags values
    for ((i = 2; i < CURRENT; i++)); do
        w=${words[i]}
`)
	writeFollow(w, root)
	fmt.Fprint(w, `    done
    case "$cmdpath" in
`)
	for _, n := range completionNodes(root) {
		fmt.Fprintf(w, "    %s) opts=(%s) flags=(%s) values=(%s) ;;\n", zshQuote(n.path), zshEntries(n.words), zshEntries(n.flags), strings.Join(n.value, " "))
	}
	fmt.Fprint(w, `    esac
    if (( ${values[(Ie)$prev]} )); then
        _files
    elif [[ ${words[CURRENT]} == -* ]]; then
        _describe -t flags 'flag' flags
    elif (( ${#opts} )); then
        _describe -t commands 'command' opts
    else
        _files
    fi
}

# Autoloaded from $fpath the file is the function's body: run it then.
if [ "$funcstack[1]" = "_jetpool" ]; then
    _jetpool "$@"
fi
`)
}

func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func writeFish(w io.Writer, root *cmdSpec) {
	fmt.Fprint(w, `# fish completion for jetpool, written by 'jetpool completion fish':
#   jetpool completion fish > ~/.config/fish/completions/jetpool.fish

# __jetpool_path prints the words that lead to the cursor: "", "run", "dlq list".
function __jetpool_path
    set -l words (commandline -opc)
    set -e words[1]
    set -l path
    for w in $words
        string match -q -- '-*' $w; and continue
        if test (count $path) -eq 0
            set path $w
`)
	for _, c := range root.subs {
		if subs := transitions(root)[c.name]; len(subs) > 0 {
			fmt.Fprintf(w, "        else if test \"$path\" = %s; and contains -- $w %s\n            set path %s $w\n", c.name, strings.Join(subs, " "), c.name)
		}
	}
	fmt.Fprint(w, `        end
    end
    echo $path
end

function __jetpool_at
    set -l p (__jetpool_path)
    test "$p" = "$argv"
end

complete -c jetpool -e
`)
	for _, n := range completionNodes(root) {
		cond := fishQuote(strings.TrimSpace("__jetpool_at " + n.path))
		for _, wd := range n.words {
			fmt.Fprintf(w, "complete -c jetpool -n %s -f -a %s -d %s\n", cond, fishQuote(wd.name), fishQuote(oneLine(wd.help)))
		}
		value := map[string]bool{}
		for _, v := range n.value {
			value[v] = true
		}
		for _, f := range n.flags {
			opt := " -r"
			if !value[f.name] {
				opt = ""
			}
			fmt.Fprintf(w, "complete -c jetpool -n %s -l %s%s -d %s\n", cond, strings.TrimPrefix(f.name, "--"), opt, fishQuote(oneLine(f.help)))
		}
	}
}
