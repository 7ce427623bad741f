package fakehost

import (
	"crypto/x509"
	"os"
	"path/filepath"
)

// Changes a test makes to a running fake host, for situations a host gets
// into after it was created (the sim's nodes are created once).

// SetModulePolicy sets the kernel's module-loading policy as Spec's
// Lockdown, SigEnforce and ModulesDisabled describe it.
func SetModulePolicy(root string, s Spec) error { return createModulePolicy(root, s) }

// InstallHeaders adds the kernel build tree for kernel, Debian's layout
// when debian (its .kernelvariables names gcc-12), with make and gcc-12.
func InstallHeaders(root, kernel string, debian bool) error {
	return createHeaders(root, Spec{Kernel: kernel, KernelHeaders: true, DebianHeaders: debian})
}

// PullCards models every Tenstorrent card gone from the bus (removed, or
// fallen off it): no PCI function, no device node, nothing for tt-smi.
func PullCards(root string) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	dirs, _ := filepath.Glob(filepath.Join(root, pciDir, "*"))
	for _, d := range dirs {
		if v, _ := readTrim(filepath.Join(d, "vendor")); v == vendorTenstorrent {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{devDir, classDir} {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	st.Devices = nil
	return saveState(root, st)
}

// SetBrokenBuild makes `make modules` fail as with a compiler mismatch
// (Spec.BrokenBuild), or build again.
func SetBrokenBuild(root string, broken bool) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.BrokenBuild = broken
	return saveState(root, st)
}

// TrustCerts sets the certificates (PEM or DER) the kernel trusts for
// module signatures (Spec.TrustedCerts): an admin enrolled them as MOKs.
func TrustCerts(root string, certs ...[]byte) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.TrustedCerts = nil
	for _, b := range certs {
		cs, err := ParseCertificates(b)
		if err != nil {
			return err
		}
		for _, c := range cs {
			st.TrustedCerts = append(st.TrustedCerts, c.Raw)
		}
	}
	return saveState(root, st)
}

// CheckModuleSignature is the fake kernel's signature check of a module
// file's bytes against the certificates (PEM or DER) it trusts: nil when
// one of them signed it.
func CheckModuleSignature(module []byte, trusted ...[]byte) error {
	var certs []*x509.Certificate
	for _, b := range trusted {
		cs, err := ParseCertificates(b)
		if err != nil {
			return err
		}
		certs = append(certs, cs...)
	}
	return checkModuleSig(module, certs)
}

// KillNextFlash makes the next tt-flash die after writing the SPI and
// before its reset: the flash reached the SPI, the cards run the old image.
func KillNextFlash(root string) error {
	st, err := loadState(root)
	if err != nil {
		return err
	}
	st.FlashKilledAfterWrite = true
	return saveState(root, st)
}
