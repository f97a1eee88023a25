package workflow

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// PricesEnv names a price file (LiteLLM's format) for every workflow Load
// reads; a workflow's own prices: wins over it.
const PricesEnv = "JETPOOL_PRICES"

// priceSource is where the parser looks up the prices of actions without
// a price: block: a price file, then the built-in table.
type priceSource struct {
	file *pricing.File // nil: none
	from string        // "prices" (the workflow's key) or PricesEnv
	line int           // of the prices: key; 0 for PricesEnv
}

// loadPrices reads the price file of the workflow's prices: key (relative
// to the workflow file), else the one PricesEnv named to Load.
func (p *parser) loadPrices(f *field) {
	name, line, from := p.pricesEnv, 0, PricesEnv
	if f != nil {
		s, ok := p.str(*f)
		if !ok {
			return
		}
		if strings.TrimSpace(s) == "" {
			p.errorf(f.val.Line, f.path, "empty; want the path of a price file in LiteLLM's format (model_prices_and_context_window.json)")
			return
		}
		name, line, from = s, f.val.Line, "prices"
		if !filepath.IsAbs(name) {
			name = filepath.Join(p.dir, name)
		}
	}
	if name == "" {
		return
	}
	file, err := pricing.LoadFile(name)
	if err != nil {
		p.errorf(line, from, "%v", err)
		return
	}
	p.prices = priceSource{file: file, from: from, line: line}
}

// known is what the price file, else the built-in table, knows of model on
// the provider called providerName (Model.Key "" when neither knows it),
// and whether that prices it. A price file's entry that cannot be read is
// reported at the model's line.
func (p *parser) known(providerName, model string, line int, path string) (pricing.Model, bool) {
	if p.encoded {
		return pricing.Model{}, false // a job carries the prices it was dispatched with
	}
	if f := p.prices.file; f != nil {
		m, ok, err := f.Lookup(providerName, model)
		if err != nil {
			p.errorf(line, path, "%v", err)
			return pricing.Model{}, false
		}
		if m.Key != "" {
			return m, ok
		}
	}
	m, ok := pricing.Lookup(providerName, model)
	return m, ok
}

// resolvePrice is the price an action (or an overflow fallback) is billed
// at, and what the tables know of its model: its own price: (or the
// defaults'), else its provider entry's, else the price file's, else the
// built-in table's; nil when none is known. The model's context window
// comes from the price file or the table whichever price wins.
func (p *parser) resolvePrice(own, entry *pricing.Price, providerName, model string, line int, path string) (*pricing.Price, pricing.Model) {
	m, priced := p.known(providerName, model, line, path)
	switch {
	case own != nil:
		return own, m
	case entry != nil:
		return entry, m
	case priced:
		pr := m.Price
		return &pr, m
	}
	return nil, m
}

// unpriced says why an action has no price, for `jetpool validate`.
func (w *Workflow) unpriced(a *Action) string {
	where := "the built-in table"
	if names := pricing.TableProviders(); !slices.Contains(names, a.Provider) {
		where += ", which prices the models of " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " only"
	}
	where = "not in " + where
	if w.Prices != "" {
		where = "in neither " + w.Prices + " nor " + strings.TrimPrefix(where, "not in ")
	}
	return fmt.Sprintf("unpriced: set `price:` or load a price file (%s/%s is %s; only exact model ids and their dated snapshots are priced): its cost is not counted",
		a.Provider, cmp.Or(a.Model, "(default model)"), where)
}

// describePrice writes an action's price, its model's context window and
// retirement, for `jetpool validate`.
func (w *Workflow) describePrice(a *Action, kind string, row func(label, format string, args ...any)) {
	switch {
	case a.Price != nil:
		row("price", "%s", a.Price)
	case kind != provider.KindSim:
		row("price", "%s", w.unpriced(a))
	}
	if a.ContextWindow > 0 {
		est := ""
		if a.Overflow != nil {
			est = " (overflow: estimates a prompt against it before the first call)"
		}
		row("context", "%s input tokens%s", retry.Thousands(a.ContextWindow), est)
	}
	if a.Retires != "" {
		if (pricing.Model{Retires: a.Retires}).Retired(time.Now()) {
			row("retired", "%s, its price source says: calls to %s may be refused", a.Retires, a.Model)
		} else {
			row("retires", "%s, its price source says", a.Retires)
		}
	}
}
