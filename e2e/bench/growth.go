package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// growthMetric is the figure the growth tables follow across data sets:
// what a sample costs a server as its active series grow, the figure a
// design that is fast at 10 k and slow at 1 M gives away.
const growthMetric = "CPU, µs per sample (load + until idle)"

// growthTable is one request shape's growthMetric across the data sets
// that ran with it, fewest series first: a row per server, a cell per
// data set. A cell's Ratio is its median over the same server's at the
// fewest series (0 there, or when either is missing).
type growthTable struct {
	Layout  Layout
	Columns []string // data sets, e.g. "10 k × 720"
	Servers []string // kind keys, in the blocks' column order
	Cells   [][]Cell // [server][data set]
}

// growthTables builds a growthTable for each request shape that ran at
// more than one number of series, in the order the shapes first ran.
func growthTables(blocks []Block) []growthTable {
	var layouts []Layout
	byLayout := map[Layout][]Block{}
	for _, b := range blocks {
		if _, ok := byLayout[b.Layout]; !ok {
			layouts = append(layouts, b.Layout)
		}
		byLayout[b.Layout] = append(byLayout[b.Layout], b)
	}
	var out []growthTable
	for _, l := range layouts {
		bs := slices.Clone(byLayout[l])
		slices.SortStableFunc(bs, func(a, b Block) int { return cmp.Compare(a.Dataset.Series, b.Dataset.Series) })
		if bs[0].Dataset.Series == bs[len(bs)-1].Dataset.Series {
			continue // one number of series: nothing grew
		}
		g := growthTable{Layout: l}
		for _, b := range bs {
			g.Columns = append(g.Columns, short(float64(b.Dataset.Series))+" × "+group(float64(b.Dataset.Samples)))
			for _, s := range b.Servers {
				if !slices.Contains(g.Servers, s) {
					g.Servers = append(g.Servers, s)
				}
			}
		}
		for _, s := range g.Servers {
			row := make([]Cell, len(bs))
			for k, b := range bs {
				row[k] = blockCell(b, growthMetric, s)
			}
			if base := row[0]; base.N > 0 && base.Median != 0 {
				for k := 1; k < len(row); k++ {
					if row[k].N > 0 {
						row[k].Ratio = row[k].Median / base.Median
					}
				}
			}
			g.Cells = append(g.Cells, row)
		}
		out = append(out, g)
	}
	return out
}

// blockCell is server's cell of the row named metric in b, without its
// ratio to dendro-receiver; N 0 when there is none.
func blockCell(b Block, metric, server string) Cell {
	for _, r := range b.Rows {
		if r.Metric != metric {
			continue
		}
		for _, c := range r.Cells {
			if c.Server == server {
				c.Ratio = 0
				return c
			}
		}
	}
	return Cell{Server: server}
}

// writeGrowth prints the growth tables as Markdown.
func writeGrowth(b *strings.Builder, blocks []Block, names map[string]string) {
	for _, g := range growthTables(blocks) {
		shape := fmt.Sprintf("%d samples per series per request", g.Layout.PerSeries)
		if g.Layout.PerSeries == 1 {
			shape = "1 sample per series per request"
		}
		fmt.Fprintf(b, "\n## As series grow: %s, %s\n\n", growthMetric, shape)
		rows := [][]string{append([]string{"server"}, g.Columns...)}
		for i, s := range g.Servers {
			line := []string{names[s]}
			for _, c := range g.Cells[i] {
				line = append(line, cellText(c))
			}
			rows = append(rows, line)
		}
		writeMarkdown(b, rows)
		b.WriteString("\nCells: median (min–max) over the rounds; ×: over the same server's median at the fewest series.\n")
	}
}
