package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// page is one markdown file of the documentation, split into what the
// checks read: prose (links), code spans and the lines of code blocks
// (commands, names), and headings (anchors).
type page struct {
	path     string // relative to the repository root, slash-separated
	text     string
	prose    []located // prose lines, code spans blanked
	spans    []located // inline code spans, line breaks made spaces
	blocks   []located // logical lines of fenced code blocks
	headings []string  // heading texts, in order
	table    map[string][][]string
}

// located is a piece of a page and the line it starts on.
type located struct {
	line int
	text string
}

func (p *page) where(line int) string { return p.path + ":" + strconv.Itoa(line) }

// loadPages reads README.md and every docs/*.md.
func loadPages(t *testing.T) []*page {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var pages []*page
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		pages = append(pages, parsePage(filepath.ToSlash(rel), string(b)))
	}
	if len(pages) < 2 {
		t.Fatalf("found %d pages; want README.md and docs/*.md", len(pages))
	}
	return pages
}

var (
	fence   = regexp.MustCompile("^\\s*(```|~~~)")
	heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// backticks is a run of backticks, which opens or closes a code span.
	backticks = regexp.MustCompile("`+")
)

func parsePage(path, text string) *page {
	p := &page{path: path, text: text, table: map[string][][]string{}}
	lines := strings.Split(text, "\n")
	var para []located // the prose lines of the current paragraph
	flush := func() {
		p.addParagraph(para)
		para = nil
	}
	inFence, cont := false, ""
	contLine := 0
	for i, l := range lines {
		n := i + 1
		if fence.MatchString(l) {
			flush()
			inFence = !inFence
			continue
		}
		if inFence {
			// A shell line ending in a backslash goes on.
			if cont == "" {
				contLine = n
			}
			if strings.HasSuffix(l, "\\") {
				cont += strings.TrimSuffix(l, "\\") + " "
				continue
			}
			p.blocks = append(p.blocks, located{contLine, cont + l})
			cont = ""
			continue
		}
		if m := heading.FindStringSubmatch(l); m != nil {
			flush()
			p.headings = append(p.headings, m[2])
			p.addParagraph([]located{{n, m[2]}})
			continue
		}
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		para = append(para, located{n, l})
	}
	flush()
	p.readTables(lines)
	return p
}

// addParagraph takes the code spans out of a paragraph, which may cross
// line breaks, and keeps the rest as prose.
func (p *page) addParagraph(para []located) {
	if len(para) == 0 {
		return
	}
	var b strings.Builder
	starts := []int{} // offset of each line in b
	for _, l := range para {
		starts = append(starts, b.Len())
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	text := b.String()
	lineAt := func(off int) int {
		i := len(starts) - 1
		for i > 0 && starts[i] > off {
			i--
		}
		return para[i].line
	}
	prose := []byte(text)
	runs := backticks.FindAllStringIndex(text, -1)
	for i := 0; i < len(runs); i++ {
		open := runs[i]
		for j := i + 1; j < len(runs); j++ {
			if runs[j][1]-runs[j][0] != open[1]-open[0] {
				continue
			}
			span := strings.TrimSpace(strings.ReplaceAll(text[open[1]:runs[j][0]], "\n", " "))
			p.spans = append(p.spans, located{lineAt(open[0]), span})
			for k := open[0]; k < runs[j][1]; k++ {
				if prose[k] != '\n' {
					prose[k] = ' '
				}
			}
			i = j
			break
		}
	}
	for i, l := range strings.Split(strings.TrimSuffix(string(prose), "\n"), "\n") {
		p.prose = append(p.prose, located{para[i].line, l})
	}
}

// readTables keeps every table by its header row, such as
// "| variable | default | meaning |", as rows of trimmed cells.
func (p *page) readTables(lines []string) {
	header := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			header = ""
			continue
		}
		if header == "" {
			header = l
			continue
		}
		if strings.HasPrefix(l, "|---") || strings.HasPrefix(l, "|:--") || strings.HasPrefix(l, "|--:") {
			continue
		}
		p.table[header] = append(p.table[header], cells(l))
	}
}

func cells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var out []string
	for _, c := range strings.Split(row, "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

// anchors are the fragment ids GitHub gives a page's headings.
func (p *page) anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, h := range p.headings {
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: the text without markup, in
// lower case, with spaces made hyphens and other punctuation dropped.
func slug(h string) string {
	h = inlineLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// word is one word of a shell line; quoted words are never flags.
type word struct {
	text   string
	quoted bool
}

// shellWords splits a command line as a shell would, roughly: on blanks,
// keeping quoted text together, up to a comment.
func shellWords(line string) []word {
	var out []word
	var cur strings.Builder
	in, quoted, started := rune(0), false, false
	emit := func() {
		if started {
			out = append(out, word{cur.String(), quoted})
		}
		cur.Reset()
		quoted, started = false, false
	}
	for _, r := range line {
		switch {
		case in != 0 && r == in:
			in = 0
		case in != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			in, quoted, started = r, true, true
		case r == '#' && !started:
			emit()
			return out
		case unicode.IsSpace(r):
			emit()
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	emit()
	return out
}

// commands splits a line into its commands at &&, ||, ; and |, each
// without the variable assignments that lead it.
func commands(line string) [][]word {
	var out [][]word
	var cur []word
	for _, w := range shellWords(line) {
		if !w.quoted && (w.text == "&&" || w.text == "||" || w.text == ";" || w.text == "|") {
			out, cur = append(out, cur), nil
			continue
		}
		cur = append(cur, w)
	}
	out = append(out, cur)
	for i, c := range out {
		for len(c) > 0 && !c[0].quoted && assignment.MatchString(c[0].text) {
			c = c[1:]
		}
		out[i] = c
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
