package translate_test

import (
	"reflect"
	"testing"

	"github.com/tidalqos/tidal/isolation/translate"
	"github.com/tidalqos/tidal/plugins"
)

func TestIOMaxRoundTrips(t *testing.T) {
	limits := []plugins.IOLimit{
		{Device: "8:16", WriteBps: 1 << 20},
		{Device: "254:0", ReadBps: 100, ReadIOPS: 7, WriteIOPS: 9},
		{Device: "7:3"}, // unlimited: left out
	}
	got := translate.IOMax(limits)
	want := "254:0 rbps=100 wbps=max riops=7 wiops=9;8:16 rbps=max wbps=1048576 riops=max wiops=max"
	if got != want {
		t.Fatalf("IOMax = %q, want %q", got, want)
	}
	back, err := translate.ParseIOMax(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, []plugins.IOLimit{limits[1], limits[0]}) {
		t.Errorf("parsed back %+v", back)
	}
	// The kernel's own io.max text (newline-separated) reads the same.
	if k, _ := translate.ParseIOMax("254:0 rbps=100 wbps=max riops=7 wiops=9\n8:16 rbps=max wbps=1048576 riops=max wiops=max\n"); translate.IOMax(k) != want {
		t.Errorf("kernel text reads as %q", translate.IOMax(k))
	}
	if _, err := translate.ParseIOMax("sda rbps=1"); err == nil {
		t.Error("a device name instead of MAJ:MIN was accepted")
	}
}

func TestIOSettingsTranslate(t *testing.T) {
	if c := translate.ToCgroup(plugins.Settings{}); c.IOMaxSet || c.IOWeight != 0 {
		t.Errorf("unset IO knobs are written: %+v", c)
	}
	c := translate.ToCgroup(plugins.Settings{IOLimits: []plugins.IOLimit{{Device: "1:2"}}, IOWeight: 5000})
	if !c.IOMaxSet || c.IOMax != "" || c.IOWeight != translate.MaxIOWeight {
		t.Errorf("clearing throttles / clamping weight: %+v", c)
	}
}
