// Package warmpool keeps ipamd's pool of pod addresses at its targets
// (docs/reference-facts.md#warm-pool): it attaches ENIs and asks EC2 for addresses as the
// pool runs low, and gives them back when it is over target, at most once
// per scale-down interval, backing off after the subnet runs out.
//
// The manager does one pass per Step, so the daemon drives it from a
// ticker and the scenario harness from its simulated clock.
package warmpool

import (
	"fmt"
	"os"
	"strconv"
)

// Targets are the reference's warm-pool settings.
type Targets struct {
	WarmENI    int // WARM_ENI_TARGET: free ENIs' worth of addresses to keep (default 1)
	WarmIP     int // WARM_IP_TARGET: free addresses to keep (0 = unset)
	MinimumIP  int // MINIMUM_IP_TARGET: addresses to have in all (0 = unset)
	WarmPrefix int // WARM_PREFIX_TARGET: free /28s to keep with prefix delegation (0 = unset)
	// PrefixDelegation (ENABLE_PREFIX_DELEGATION) gets /28 prefixes, 16
	// addresses each, instead of single secondary addresses.
	PrefixDelegation bool
	// MaxENI (MAX_ENI) caps the ENIs attached, below the instance limit;
	// 0 or less means the instance limit.
	MaxENI int
}

// DefaultTargets are the reference's defaults.
func DefaultTargets() Targets { return Targets{WarmENI: 1} }

// ipGranular reports whether the pool is sized in addresses (WARM_IP or
// MINIMUM_IP set) rather than in whole ENIs.
func (t Targets) ipGranular() bool { return t.WarmIP > 0 || t.MinimumIP > 0 }

// Env names of the settings, as the reference reads them.
const (
	EnvWarmENI          = "WARM_ENI_TARGET"
	EnvWarmIP           = "WARM_IP_TARGET"
	EnvMinimumIP        = "MINIMUM_IP_TARGET"
	EnvWarmPrefix       = "WARM_PREFIX_TARGET"
	EnvPrefixDelegation = "ENABLE_PREFIX_DELEGATION"
	EnvMaxENI           = "MAX_ENI"
)

// TargetsFromEnv reads the settings from the environment over the
// defaults. A value that is not a number is an error naming the variable
// (the reference silently falls back; a typo should not go unnoticed); a
// negative WARM_ENI_TARGET means the default, as in the reference.
func TargetsFromEnv(getenv func(string) string) (Targets, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	t := DefaultTargets()
	ints := []struct {
		name string
		dst  *int
	}{{EnvWarmENI, &t.WarmENI}, {EnvWarmIP, &t.WarmIP}, {EnvMinimumIP, &t.MinimumIP}, {EnvWarmPrefix, &t.WarmPrefix}, {EnvMaxENI, &t.MaxENI}}
	for _, v := range ints {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return t, fmt.Errorf("%s=%q: not a whole number", v.name, s)
		}
		*v.dst = n
	}
	// Ranges are ipamd's to check (its flags default from these), so a
	// negative value reaches it and is refused there, never replaced.
	if s := getenv(EnvPrefixDelegation); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return t, fmt.Errorf("%s=%q: want true or false", EnvPrefixDelegation, s)
		}
		t.PrefixDelegation = b
	}
	return t, nil
}

// Settings lists the targets under their environment names, for the
// introspection endpoint.
func (t Targets) Settings() map[string]string {
	return map[string]string{
		EnvWarmENI: strconv.Itoa(t.WarmENI), EnvWarmIP: strconv.Itoa(t.WarmIP), EnvMinimumIP: strconv.Itoa(t.MinimumIP),
		EnvWarmPrefix: strconv.Itoa(t.WarmPrefix), EnvPrefixDelegation: strconv.FormatBool(t.PrefixDelegation),
		EnvMaxENI: strconv.Itoa(t.MaxENI),
	}
}

// need is how far the pool is from its targets, in addresses: short > 0
// means get that many more, over > 0 means that many could go back.
// perENI is how many pod addresses one ENI holds at most.
func (t Targets) need(total, available, perENI int) (short, over int) {
	if t.ipGranular() {
		short = max(t.WarmIP-available, t.MinimumIP-total, 0)
		if t.WarmIP > 0 {
			over = available - t.WarmIP
		} else {
			over = available
		}
		if t.MinimumIP > 0 {
			over = min(over, total-t.MinimumIP)
		}
		return short, max(over, 0)
	}
	if t.PrefixDelegation && t.WarmPrefix > 0 {
		want := t.WarmPrefix * 16
		return max(want-available, 0), max(available-want-15, 0)
	}
	// ENI granularity: keep WARM_ENI_TARGET whole ENIs' worth free.
	want := t.WarmENI * perENI
	return max(want-available, 0), max(available-want, 0)
}
