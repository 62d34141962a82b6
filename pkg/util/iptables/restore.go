package iptables

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// MaxCommentLen is the longest comment xt_comment stores (XT_MAX_COMMENT_LEN - 1).
const MaxCommentLen = 255

// SanitizeComment makes s safe and storable as a rule comment: invalid UTF-8 and
// control characters (newlines, tabs, DEL, ...) become spaces and the result is cut
// to 255 bytes on a character boundary. Use it for comments passed as a separate
// argument (EnsureRule); Builder applies it to every --comment value.
func SanitizeComment(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				r = ' '
			}
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > MaxCommentLen {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// bareComment lists the characters iptables-save prints a comment without quotes
// for (libxtables' save-string rule); anything else is quoted with \ before " \ '.
const bareComment = "_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// QuoteComment renders a comment exactly as iptables-save prints it, so restore
// input built with it reads back byte for byte and nothing in s (a Service name,
// quotes, backslashes, '#', newlines) can end the word or the line.
func QuoteComment(s string) string {
	s = SanitizeComment(s)
	if s != "" && strings.Trim(s, bareComment) == "" {
		return s
	}
	return quote(s)
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' || r == '\'' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// quoteWord renders any other word: bare when it cannot be misread by
// iptables-restore's tokenizer, otherwise quoted (control characters become spaces).
func quoteWord(s string) string {
	if s == "" {
		return `""`
	}
	if !strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r == 0x7f || r == '"' || r == '\'' || r == '\\' || r == '#' || r == utf8.RuneError
	}) {
		return s
	}
	return quote(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s))
}

// Builder accumulates iptables-restore input. Words are quoted as needed, and the
// word after "--comment" is treated as a comment, so callers never quote by hand.
type Builder struct {
	buf bytes.Buffer
}

// Table starts a table ("*nat").
func (b *Builder) Table(t Table) { b.buf.WriteString("*" + string(t) + "\n") }

// Chain declares a chain (":KUBE-SERVICES - [0:0]"); with --noflush an existing user
// chain is flushed and a built-in one keeps its rules. policy is "-" for user chains.
func (b *Builder) Chain(c Chain, policy string) {
	if policy == "" {
		policy = "-"
	}
	b.buf.WriteString(":" + quoteWord(string(c)) + " " + quoteWord(policy) + " [0:0]\n")
}

// Line writes one command line from words ("-A", "KUBE-SERVICES", "-m", ...).
func (b *Builder) Line(words ...string) {
	b.buf.WriteString(JoinWords(words...))
	b.buf.WriteByte('\n')
}

// Commit ends the current table.
func (b *Builder) Commit() { b.buf.WriteString("COMMIT\n") }

// Bytes returns the input built so far.
func (b *Builder) Bytes() []byte { return b.buf.Bytes() }

// String returns the input built so far.
func (b *Builder) String() string { return b.buf.String() }

// Reset empties the builder, keeping its memory.
func (b *Builder) Reset() { b.buf.Reset() }

// Len is the number of bytes built.
func (b *Builder) Len() int { return b.buf.Len() }

// JoinWords renders words as one restore line (without newline).
func JoinWords(words ...string) string {
	var sb strings.Builder
	for i, w := range words {
		if i > 0 {
			sb.WriteByte(' ')
		}
		if i > 0 && words[i-1] == "--comment" {
			sb.WriteString(QuoteComment(w))
		} else {
			sb.WriteString(quoteWord(w))
		}
	}
	return sb.String()
}

// splitWords tokenizes one restore line like iptables-restore does: blanks separate
// words, double quotes group them, and a backslash takes the next character
// literally (inside or outside quotes). ok is false for an unterminated quote.
func splitWords(line string) (words []string, ok bool) {
	var cur strings.Builder
	inWord, inQuote, escaped := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\':
			escaped, inWord = true, true
		case r == '"':
			inQuote, inWord = !inQuote, true
		case !inQuote && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inQuote || escaped {
		return nil, false
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}
