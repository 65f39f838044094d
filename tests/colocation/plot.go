package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// A chart is panels stacked over one time axis, drawn into a PNG with nothing but the standard
// image packages and a bitmap font: frames, ticks, labels, a legend per panel, and vertical
// markers (the phases of the day).
type chart struct {
	title  string
	x0, x1 float64 // the time axis, seconds
	marks  []mark
	panels []panel
}

type mark struct {
	x     float64
	label string
}

type panel struct {
	title  string
	lo, hi float64
	log    bool // log10 scale (lo > 0)
	lines  []line
}

type line struct {
	name   string
	c      color.RGBA
	pts    xy
	dashed bool
}

// Layout in pixels.
const (
	plotW   = 1000
	panelH  = 150
	gapH    = 34 // between panels: room for the next panel's title
	leftW   = 64
	rightW  = 170 // legend
	topH    = 40
	bottomH = 40
	charW   = 7 // basicfont.Face7x13
)

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{150, 150, 150, 255}
	light = color.RGBA{225, 225, 225, 255}
	white = color.RGBA{255, 255, 255, 255}
	// Line colors.
	blue   = color.RGBA{31, 119, 180, 255}
	orange = color.RGBA{255, 127, 14, 255}
	green  = color.RGBA{44, 160, 44, 255}
	red    = color.RGBA{214, 39, 40, 255}
	purple = color.RGBA{148, 103, 189, 255}
	teal   = color.RGBA{23, 190, 207, 255}
)

// writePNG draws the chart into file.
func (c chart) writePNG(file string) error {
	h := topH + len(c.panels)*(panelH+gapH) - gapH + bottomH
	img := image.NewRGBA(image.Rect(0, 0, plotW, h))
	fill(img, img.Bounds(), white)
	text(img, leftW, 18, c.title, black)
	for i, p := range c.panels {
		top := topH + i*(panelH+gapH)
		c.drawPanel(img, p, image.Rect(leftW, top, plotW-rightW, top+panelH), i == len(c.panels)-1)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c chart) drawPanel(img *image.RGBA, p panel, r image.Rectangle, last bool) {
	text(img, r.Min.X, r.Min.Y-6, p.title, black)
	px := func(x float64) int { return r.Min.X + int(math.Round((x-c.x0)/(c.x1-c.x0)*float64(r.Dx()))) }
	py := func(y float64) int {
		lo, hi := p.lo, p.hi
		if p.log {
			y, lo, hi = math.Log10(math.Max(y, p.lo)), math.Log10(lo), math.Log10(hi)
		}
		f := (math.Min(math.Max(y, lo), hi) - lo) / (hi - lo)
		return r.Max.Y - int(math.Round(f*float64(r.Dy())))
	}
	// Grid and y ticks.
	for _, t := range ticks(p.lo, p.hi, p.log) {
		y := py(t)
		hline(img, r.Min.X, r.Max.X, y, light)
		label := fmtFloat(t)
		text(img, r.Min.X-6-charW*len(label), y+4, label, black)
	}
	// Time ticks, and the phase markers.
	for _, t := range ticks(c.x0, c.x1, false) {
		x := px(t)
		vline(img, x, r.Min.Y, r.Max.Y, light)
		if last {
			label := fmtFloat(t)
			text(img, x-charW*len(label)/2, r.Max.Y+16, label, black)
		}
	}
	for _, m := range c.marks {
		x := px(m.x)
		for y := r.Min.Y; y < r.Max.Y; y += 6 {
			vline(img, x, y, min(y+3, r.Max.Y), grey)
		}
		text(img, x+3, r.Min.Y+12, m.label, grey)
	}
	if last {
		text(img, r.Min.X+r.Dx()/2-150, r.Max.Y+34, "seconds since the day began (warm-up before 0)", black)
	}
	// Lines, clipped to the panel.
	clip := img.SubImage(r.Inset(-1)).(*image.RGBA)
	for _, l := range p.lines {
		for i := 1; i < len(l.pts.X); i++ {
			drawLine(clip, px(l.pts.X[i-1]), py(l.pts.Y[i-1]), px(l.pts.X[i]), py(l.pts.Y[i]), l.c, l.dashed)
		}
	}
	frame(img, r, black)
	// Legend, to the right.
	for i, l := range p.lines {
		y := r.Min.Y + 8 + i*16
		fill(img, image.Rect(r.Max.X+12, y, r.Max.X+26, y+4), l.c)
		text(img, r.Max.X+32, y+6, l.name, black)
	}
}

// ticks are round values in [lo, hi]: decades on a log scale, else steps of 1, 2 or 5 x 10^k.
func ticks(lo, hi float64, log bool) []float64 {
	var out []float64
	if log {
		for v := math.Pow(10, math.Ceil(math.Log10(lo))); v <= hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	raw := (hi - lo) / 5
	step := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step*m >= raw {
			step *= m
			break
		}
	}
	for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// fmtFloat writes a tick or figure without needless digits (1, 2.5, 1000, 10000).
func fmtFloat(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0" // not "-0"
	}
	if math.Abs(v) >= 1e4 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) { fill(img, image.Rect(x0, y, x1+1, y+1), c) }
func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) { fill(img, image.Rect(x, y0, x+1, y1+1), c) }

func frame(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	hline(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hline(img, r.Min.X, r.Max.X, r.Max.Y, c)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, c)
	vline(img, r.Max.X, r.Min.Y, r.Max.Y, c)
}

// drawLine draws a 2-pixel-wide segment (Bresenham), dashed if asked. Points outside img are
// skipped, so a sub-image clips.
func drawLine(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for n := 0; ; n++ {
		if !dashed || (n/5)%2 == 0 {
			for _, p := range []image.Point{{x0, y0}, {x0, y0 + 1}} {
				if p.In(img.Bounds()) {
					img.SetRGBA(p.X, p.Y, c)
				}
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
