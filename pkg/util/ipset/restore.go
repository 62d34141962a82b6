package ipset

import (
	"fmt"
	"strconv"
)

// appendLine renders one operation as an `ipset restore` line. Operations must have
// been validated (names and entries contain no blanks) before the script is run.
func appendLine(b []byte, o op) []byte {
	switch o.kind {
	case opCreate:
		s := o.spec
		b = append(b, "create "...)
		b = append(b, o.set...)
		b = append(b, ' ')
		b = append(b, s.Type...)
		if s.Type == BitmapPort {
			b = append(b, " range "...)
			b = strconv.AppendInt(b, int64(s.PortMin), 10)
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(s.PortMax), 10)
		} else {
			b = append(b, " family "...)
			b = append(b, s.Family...)
			b = append(b, " hashsize "...)
			b = strconv.AppendInt(b, int64(s.HashSize), 10)
			b = append(b, " maxelem "...)
			b = strconv.AppendInt(b, int64(s.MaxElem), 10)
		}
	case opAdd, opDel:
		if o.kind == opAdd {
			b = append(b, "add "...)
		} else {
			b = append(b, "del "...)
		}
		b = append(b, o.set...)
		b = append(b, ' ')
		b = append(b, o.arg...)
	case opFlush:
		b = append(b, "flush "...)
		b = append(b, o.set...)
	case opDestroy:
		b = append(b, "destroy "...)
		b = append(b, o.set...)
	case opSwap:
		b = append(b, "swap "...)
		b = append(b, o.set...)
		b = append(b, ' ')
		b = append(b, o.arg...)
	}
	return append(b, '\n')
}

// prepare validates every operation and returns the batch with defaults filled in
// and entries in canonical form where the set's type is known from a create earlier
// in the same batch. Nothing runs when it fails: the error names the operation.
func (tx *Transaction) prepare() ([]op, error) {
	out := make([]op, len(tx.ops))
	known := map[string]*Set{} // sets created earlier in this batch
	for i, o := range tx.ops {
		invalid := func(err error) error {
			return &Error{Command: "restore", Index: i, Line: opLine(o), Kind: ErrInvalid, Reason: err.Error()}
		}
		if err := ValidateName(o.set); err != nil {
			return nil, invalid(err)
		}
		switch o.kind {
		case opCreate:
			if o.spec == nil || o.spec.Name != o.set {
				return nil, invalid(fmt.Errorf("create of %q without its definition", o.set))
			}
			spec, err := ValidateSet(o.spec)
			if err != nil {
				return nil, invalid(err)
			}
			o.spec = spec
			known[o.set] = spec
		case opAdd, opDel:
			if spec, ok := known[o.set]; ok {
				canon, err := CanonicalEntry(spec.Type, spec.Family, o.arg)
				if err != nil {
					return nil, invalid(err)
				}
				o.arg = canon
			} else if err := checkEntrySyntax(o.arg); err != nil {
				return nil, invalid(err)
			}
		case opSwap:
			if err := ValidateName(o.arg); err != nil {
				return nil, invalid(err)
			}
			known[o.set], known[o.arg] = known[o.arg], known[o.set]
			for _, n := range []string{o.set, o.arg} {
				if known[n] == nil {
					delete(known, n)
				}
			}
		case opDestroy:
			delete(known, o.set)
		}
		out[i] = o
	}
	return out, nil
}

// opLine is one operation's restore line without the newline.
func opLine(o op) string {
	b := appendLine(nil, o)
	return string(b[:len(b)-1])
}

func encode(ops []op) []byte {
	b := make([]byte, 0, 48*len(ops))
	for _, o := range ops {
		b = appendLine(b, o)
	}
	return b
}
