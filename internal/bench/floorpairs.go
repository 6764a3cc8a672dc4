package bench

// The floor rows' pairings: which floor row (floor.go) and which of its
// forms (the one-round placing, the guarded floor: floorguard.go) each
// shardis row is measured against, and the Summary fields their ratios
// go to.

// VsFloor pairs each shardis workload with the floor row (floor.go) that
// does the same orders with the least state a record per order needs:
// 3 items on 3 nodes; the hot SKU with records hashed over the nodes; the
// hot SKU with minted ids, whose records sit next to the stock as the
// local floor's do.
// Field is the Summary field the ratio goes to; Key is its JSON name;
// What names the shardis row in the report's targets table.
var VsFloor = []struct {
	Key, Shardis, Floor, What string
	Field                     func(*Summary) *float64
}{
	{"inventory_3item_vs_floor", VarInv3, VarFloor3, "3-item orders",
		func(s *Summary) *float64 { return &s.Inventory3ItemVsFloor }},
	{"inventory_hot_sku_vs_floor", VarHot1, VarHotFloor, "hot SKU on one node, ids the caller made up,",
		func(s *Summary) *float64 { return &s.InventoryHotVsFloor }},
	{"inventory_hot_sku_minted_vs_floor", VarHot1Minted, VarHotFloorLocal, "hot SKU on one node, ids minted by `NewOrderID`,",
		func(s *Summary) *float64 { return &s.InventoryHotMintedVsFloor }},
}

// FloorForm pairs a floor row with another form of it (Form: the same
// orders placed another way, or with more checks) and the shardis row
// over the same orders: how much of a shardis row's distance to its floor
// that form alone explains. OverFloor is the Summary field of the form's
// orders/s over the floor's, VsForm that of shardis's over the form's,
// both paired per round.
type FloorForm struct {
	Shardis   string                  // the shardis row's variant (Var…)
	Floor     string                  // the floor row's variant
	Form      string                  // the variant of the floor's other form
	OverFloor func(*Summary) *float64 // the Summary field of Form's orders/s over Floor's
	VsForm    func(*Summary) *float64 // the Summary field of Shardis's orders/s over Form's
}

// ratios are the form's orders/s over the floor's and shardis's over the
// form's in ir, each 0 when the run lacks one of its rows.
func (f FloorForm) ratios(ir *InvResult) (over, vs float64) {
	return ir.Over(f.Form, f.Floor), ir.Over(f.Shardis, f.Form)
}

// measuredForm is the form in forms whose shardis row is v, as ir
// measured it: the form's row over the floor (over), shardis's over the
// form (vs) and the form's series; ok is false when v has no form or the
// run lacks a row of it.
func measuredForm(ir *InvResult, forms []FloorForm, v string) (over, vs float64, form *Series, ok bool) {
	f, ok := formOf(forms, v)
	over, vs = f.ratios(ir)
	if !ok || over <= 0 || vs <= 0 {
		return 0, 0, nil, false
	}
	return over, vs, ir.Series[f.Form], true
}

// formOf is the form in forms whose shardis row is v.
func formOf(forms []FloorForm, v string) (FloorForm, bool) {
	for _, f := range forms {
		if f.Shardis == v {
			return f, true
		}
	}
	return FloorForm{}, false
}

// OneRoundFloors pairs each hashed floor row with its one-round placing
// (floorOrderOneRound) and the shardis row that places the same orders in
// one round trip: how much of a shardis row's distance to its floor the
// one-round shape alone costs.
var OneRoundFloors = []FloorForm{
	{VarInv3, VarFloor3, VarFloor3OneRound,
		func(s *Summary) *float64 { return &s.Inventory3ItemFloorOneRoundVsFloor },
		func(s *Summary) *float64 { return &s.Inventory3ItemVsFloorOneRound }},
	{VarHot1, VarHotFloor, VarHotFloorOneRound,
		func(s *Summary) *float64 { return &s.InventoryHotFloorOneRoundVsFloor },
		func(s *Summary) *float64 { return &s.InventoryHotVsFloorOneRound }},
}

// GuardedFloors pairs each floor row with its guarded floor row
// (floorguard.go: the floor with the checks shardis's promises make
// every reservation pay) and the shardis row over the same orders: how
// much of a shardis row's distance to its floor those checks alone cost.
var GuardedFloors = []FloorForm{
	{VarInv3, VarFloor3, VarFloor3Guarded,
		func(s *Summary) *float64 { return &s.Inventory3ItemGuardedFloorVsFloor },
		func(s *Summary) *float64 { return &s.Inventory3ItemVsGuardedFloor }},
	{VarHot1, VarHotFloor, VarHotFloorGuarded,
		func(s *Summary) *float64 { return &s.InventoryHotGuardedFloorVsFloor },
		func(s *Summary) *float64 { return &s.InventoryHotVsGuardedFloor }},
	{VarHot1Minted, VarHotFloorLocal, VarHotFloorLocalGuarded,
		func(s *Summary) *float64 { return &s.InventoryHotMintedGuardedFloorVsFloor },
		func(s *Summary) *float64 { return &s.InventoryHotMintedVsGuardedFloor }},
}
