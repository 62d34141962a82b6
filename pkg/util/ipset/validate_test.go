package ipset

import "testing"

// TestEntryTypesByPartsCoversEveryType keeps checkEntrySyntax's shortcut table in step
// with typeShapes: every supported type is listed under its component count.
func TestEntryTypesByPartsCoversEveryType(t *testing.T) {
	listed := 0
	for parts, types := range entryTypesByParts {
		for _, ty := range types {
			if len(typeShapes[ty]) != parts {
				t.Errorf("type %s listed under %d components, has %d", ty, parts, len(typeShapes[ty]))
			}
			listed++
		}
	}
	if listed != len(typeShapes) {
		t.Errorf("entryTypesByParts lists %d types, typeShapes has %d", listed, len(typeShapes))
	}
}
