// Package admission writes the CEL rules of ValidatingAdmissionPolicies from
// the objects rollbook renders: a Shape is an object exactly as the renderer
// makes it, with the few paths whose values vary (a node's name, an argv
// value) marked as holes that carry their own rules. Every other field the
// object's Go type has is pinned: equal to the rendered value where the
// renderer sets it, absent (or the API server's default) where it does not.
//
// So the policy admits what the renderer makes and refuses everything else,
// including fields nobody thought of — the generator walks the type, not a
// list of known dangers. A field a newer Kubernetes adds is not in the type
// rollbook was built with; Uncovered names them from a server's schema so a
// test can fail when the cluster grows a field the policy does not pin.
package admission
