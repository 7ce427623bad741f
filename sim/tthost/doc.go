// Package tthost simulates the host side of Tenstorrent nodes for the sim:
// one fakehost root per node (module, devices, firmware, processes), the
// fake node tools, a helper runner that executes rollbook's helper pods for
// real against those roots, and a holder sync that turns pods mounting
// /dev/tenstorrent into processes holding the devices.
//
// Layout under the sim's directory:
//
//	hosts/<node>/        fake host root of each Tenstorrent node (fakehost.Inspect it)
//	hosts/.tools/        rmmod, insmod, tt-smi, … linked to the multi-call sim binary
//	hosts/.image/tt-smi  the tt-smi binary a helper image would carry
//	hosts/.runs/         one work dir per running helper pod
//	hosts/runner.log     what the helper runner ran (bounded)
package tthost
