package kmodule

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Marker ends a signed module (MODULE_SIG_STRING).
const Marker = "~Module signature appended~\n"

// sigInfoLen is sizeof(struct module_signature): algo, hash, id_type,
// signer_len, key_id_len, __pad[3], __be32 sig_len.
const sigInfoLen = 12

// idPKCS7 is id_type PKEY_ID_PKCS7, the only kind the kernel accepts.
const idPKCS7 = 2

// ErrMalformed is a signature trailer the kernel would reject as it is.
var ErrMalformed = errors.New("malformed module signature")

// Split cuts ko into the module's content and its PKCS#7 signature
// (signed false and p7 nil without the marker), checking the trailer as
// the kernel's mod_check_sig does.
func Split(ko []byte) (content, p7 []byte, signed bool, err error) {
	if !bytes.HasSuffix(ko, []byte(Marker)) {
		return ko, nil, false, nil
	}
	b := ko[:len(ko)-len(Marker)]
	if len(b) < sigInfoLen {
		return nil, nil, true, fmt.Errorf("%w: no room for struct module_signature", ErrMalformed)
	}
	info := b[len(b)-sigInfoLen:]
	b = b[:len(b)-sigInfoLen]
	if info[2] != idPKCS7 {
		return nil, nil, true, fmt.Errorf("%w: id_type %d, not PKCS#7", ErrMalformed, info[2])
	}
	if info[0]|info[1]|info[3]|info[4]|info[5]|info[6]|info[7] != 0 {
		return nil, nil, true, fmt.Errorf("%w: a PKCS#7 signature with algo, hash, signer or key id set", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(info[8:])
	if n == 0 || uint64(n) > uint64(len(b)) {
		return nil, nil, true, fmt.Errorf("%w: sig_len %d", ErrMalformed, n)
	}
	cut := len(b) - int(n)
	return b[:cut], b[cut:], true, nil
}

// appendSignature is content ‖ p7 ‖ struct module_signature ‖ marker, as
// sign-file writes it.
func appendSignature(content, p7 []byte) []byte {
	out := make([]byte, 0, len(content)+len(p7)+sigInfoLen+len(Marker))
	out = append(append(out, content...), p7...)
	info := make([]byte, sigInfoLen)
	info[2] = idPKCS7
	binary.BigEndian.PutUint32(info[8:], uint32(len(p7)))
	return append(append(out, info...), Marker...)
}
