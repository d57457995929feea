/*
Copyright The bar-controller Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package fieldset prunes a managedFields entry's fields (FieldsV1 JSON)
// to the paths under given prefixes, in one pass over its bytes.
package fieldset

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// The informers' transform keeps, of each managedFields entry under the
// controller's manager name, the fields its drift check asks about (the
// root package's pruneOwnedFields). Any client may write such an entry,
// up to 32 KiB, and change its bytes with every write. Parsing one into a
// fieldpath.Set and writing the kept part back costs about 2 ms for
// 32 KiB, thousands of allocations, on every watch event that carries it:
// 25 times an ordinary event's CPU, whether the bytes are new each time
// (a 700-byte JSON patch of the entry) or a table of earlier results is
// made to forget them (issue 39, sixteenth and seventeenth reviews). This
// reads the JSON once, skips what no prefix reaches, and copies what one
// reaches whole, as the bytes are: a cost of the order of the decode
// every watcher of the object pays, whatever the bytes say.
//
// FieldsV1 is a JSON object whose keys are path elements ("f:spec",
// `k:{"name":"app"}`, "v:...", "i:0") or "." (the path so far is itself
// a member), and whose values are objects of the same form; a member is
// a path to a "." or to an empty object. The members kept are those whose
// path begins with a prefix: the result holds the same members as
// fieldpath.Set's parse, filter and write-back (TestPruneAgreesWithSet)
// for FieldsV1 in the form the API server stores it, which is every entry
// a watch event carries: it parses each entry it is sent into a
// fieldpath.Set and stores that set written back (apimachinery's
// fieldmanager), so no escaped ".", duplicate key, null or unusual
// spelling of a k: key reaches the controller (eighteenth review, with a
// real API server). On such bytes, which only a test can hand it, the two
// may differ.

// Any is the prefix element that matches every key at its place (the
// controller's one owner reference, whatever its UID).
const Any = ""

// Prune returns the members of raw under one of prefixes, each a list of
// serialized path elements (fieldpath.SerializePathElement) or Any, as a
// FieldsV1 JSON object (an empty one if none is). ok is false when raw is
// not a JSON object of objects as far as it had to be read: the caller
// then decides what an unreadable entry means.
func Prune(raw []byte, prefixes [][]string) (out []byte, ok bool) {
	s := &scanner{b: raw}
	var buf bytes.Buffer
	buf.Grow(len(raw) / 4)
	s.ws()
	if !s.object(&buf, prefixes) {
		return nil, false
	}
	s.ws()
	if s.i != len(s.b) {
		return nil, false
	}
	return buf.Bytes(), true
}

type scanner struct {
	b   []byte
	i   int
	key []byte // the last escaped key read, reused
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

// object reads the object at s.i and writes to out the part of it under
// prefixes (none of which is empty: object is called only below a place
// where no prefix has ended yet), always as an object.
func (s *scanner) object(out *bytes.Buffer, prefixes [][]string) bool {
	if !s.peek('{') {
		return false
	}
	s.i++
	out.WriteByte('{')
	kept := 0
	s.ws()
	if s.peek('}') {
		s.i++
		out.WriteByte('}')
		return true
	}
	next := make([][]string, 0, len(prefixes))
	// Whether a key must be read to be matched: not where every prefix
	// takes any key (the owner references' UIDs).
	named := false
	for _, p := range prefixes {
		named = named || p[0] != Any
	}
	for {
		s.ws()
		keyStart := s.i
		escaped, ok := s.str()
		if !ok {
			return false
		}
		rawKey := s.b[keyStart:s.i]
		s.ws()
		if !s.peek(':') {
			return false
		}
		s.i++
		s.ws()
		next = next[:0]
		full := false
		if !bytes.Equal(rawKey, []byte(`"."`)) {
			key := rawKey[1 : len(rawKey)-1]
			if escaped && named {
				k, ok := unescape(s.key[:0], rawKey)
				if !ok {
					return false
				}
				s.key, key = k, k
			}
			for _, p := range prefixes {
				if p[0] == Any || p[0] == string(key) { // no copy: the compiler compares in place
					next = append(next, p[1:])
					full = full || len(p) == 1
				}
			}
		}
		// A "." here is the path so far, shorter than every prefix left:
		// not kept. Nor is a key no prefix reaches.
		mark := out.Len()
		switch {
		case len(next) == 0:
			if !s.skip() {
				return false
			}
		case full:
			// A prefix ends at this key: everything under it is kept,
			// as it is.
			if kept > 0 {
				out.WriteByte(',')
			}
			out.Write(rawKey)
			out.WriteByte(':')
			start := s.i
			if !s.peek('{') || !s.skip() {
				return false
			}
			out.Write(s.b[start:s.i])
			kept++
		default:
			if kept > 0 {
				out.WriteByte(',')
			}
			out.Write(rawKey)
			out.WriteByte(':')
			inner := out.Len()
			if !s.object(out, next) {
				return false
			}
			if out.Len() == inner+2 { // {}: nothing under the key was kept
				out.Truncate(mark)
			} else {
				kept++
			}
		}
		s.ws()
		if s.peek(',') {
			s.i++
			continue
		}
		if s.peek('}') {
			s.i++
			out.WriteByte('}')
			return true
		}
		return false
	}
}

// str reads the string at s.i, and says whether it holds an escape.
func (s *scanner) str() (escaped, ok bool) {
	if !s.peek('"') {
		return false, false
	}
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '\\':
			escaped = true
			s.i++
		case c == '"':
			s.i++
			return escaped, true
		case c < 0x20:
			return false, false
		}
	}
	return false, false
}

// skip reads past the value at s.i, of any depth, without recursion.
func (s *scanner) skip() bool {
	depth := 0
	for {
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch c := s.b[s.i]; c {
		case '{', '[':
			depth++
			s.i++
			continue
		case '}', ']':
			if depth == 0 {
				return false
			}
			depth--
			s.i++
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
		case ',', ':':
			if depth == 0 {
				return false
			}
			s.i++
			continue
		default:
			// A number, true, false or null: up to the next delimiter.
			start := s.i
			for s.i < len(s.b) && !delimiter(s.b[s.i]) {
				s.i++
			}
			if s.i == start {
				return false
			}
		}
		if depth == 0 {
			return true
		}
	}
}

func delimiter(c byte) bool {
	switch c {
	case ',', ':', '{', '}', '[', ']', ' ', '\t', '\r', '\n', '"':
		return true
	}
	return false
}

// unescape appends to dst the string the JSON string token raw (quotes
// included) holds: FieldsV1 escapes the quotes of every k: key. Into a
// buffer the scanner reuses, so that reading a key allocates nothing.
func unescape(dst, raw []byte) ([]byte, bool) {
	raw = raw[1 : len(raw)-1]
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i++; i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case '"', '\\', '/':
			dst = append(dst, raw[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := hex4(raw[i+1:])
			if n == 0 {
				return nil, false
			}
			i += n
			if utf16.IsSurrogate(r) {
				if len(raw) > i+2 && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if r2, n2 := hex4(raw[i+3:]); n2 != 0 {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							r, i = dec, i+2+n2
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return nil, false
		}
	}
	return dst, true
}

// hex4 reads the four hex digits of a \u escape: the rune, and 4, or 0
// if there are not four.
func hex4(b []byte) (rune, int) {
	if len(b) < 4 {
		return 0, 0
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, 0
		}
	}
	return r, 4
}
