package inventory

// argBox boxes a call's string and integer arguments for its command line
// without an allocation each: it keeps them in two slices, made once by
// newArgBox, and hands out pointers into them (go-redis writes a *string
// or *int64 as its value). The values never change once handed out, and
// the slices live as long as a pointer into them (see run's rule on
// arguments). It also holds the call's keys and arguments slices
// (keySlice, argSlice), cut from the same allocation.
type argBox struct {
	strs []string
	ints []int64
	keys []string
	args []any
}

// argMemOne holds an argBox's slices for a call of one part in its short
// layout (localOneCall, stageTakeCall without parts, reserveCall of one
// stock part): one allocation of 224 bytes. A box sized for the largest
// layout took 512, which every order paid for twice on the staged path.
type argMemOne struct {
	s [4]string
	i [2]int64
	k [3]string
	a [6]any
}

// argMemStage holds them for a stage in its short layout of one part
// (stageTakeCall): the stage of an order without a user whose home holds
// one stock part of it and whose other parts are elsewhere. 296 bytes,
// where argMemPart, the next that fits, takes 480.
type argMemStage struct {
	s [5]string
	i [3]int64
	k [4]string
	a [8]any
}

// argMemPart holds them for a call of one part in a general layout (the
// local reserve's general path, a stage of several parts): 480 bytes.
type argMemPart struct {
	s [9]string
	i [3]int64
	k [4]string
	a [14]any
}

// newArgBox is a box for about ns strings, ni integers, nk keys and na
// arguments (more only cost an allocation): one allocation when they fit
// argMemOne, argMemStage or argMemPart, else one per slice.
func newArgBox(ns, ni, nk, na int) argBox {
	switch {
	case ns <= 4 && ni <= 2 && nk <= 3 && na <= 6:
		m := new(argMemOne)
		return argBox{strs: m.s[:0], ints: m.i[:0], keys: m.k[:0], args: m.a[:0]}
	case ns <= 5 && ni <= 3 && nk <= 4 && na <= 8:
		m := new(argMemStage)
		return argBox{strs: m.s[:0], ints: m.i[:0], keys: m.k[:0], args: m.a[:0]}
	case ns <= 9 && ni <= 3 && nk <= 4 && na <= 14:
		m := new(argMemPart)
		return argBox{strs: m.s[:0], ints: m.i[:0], keys: m.k[:0], args: m.a[:0]}
	}
	return argBox{strs: make([]string, 0, ns), ints: make([]int64, 0, ni), keys: make([]string, 0, nk), args: make([]any, 0, na)}
}

// keySlice is the empty slice for the call's keys (nk of newArgBox).
func (b *argBox) keySlice() []string { return b.keys }

// argSlice is the empty slice for the call's arguments (na of newArgBox).
func (b *argBox) argSlice() []any { return b.args }

// str is v as an argument.
func (b *argBox) str(v string) any {
	if v == "" {
		return "" // boxing the empty string allocates nothing
	}
	b.strs = append(b.strs, v)
	return &b.strs[len(b.strs)-1]
}

// int is v as an argument.
func (b *argBox) int(v int64) any {
	if v >= 0 && v < 256 {
		return v // Go boxes these without allocating
	}
	b.ints = append(b.ints, v)
	return &b.ints[len(b.ints)-1]
}
