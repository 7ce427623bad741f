package fakesubstrate

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/jhump/protoreflect/desc"
	"github.com/jhump/protoreflect/desc/protoparse"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

//go:embed protos
var protoFS embed.FS

// Era names a schema profile the fake can serve.
type Era string

const (
	// EraB2 is the flat-Worker era: no GetWorker, DrainWorker or RevertActor.
	EraB2 Era = "b2"
	// EraC is the resource-style era with DrainWorker and RevertActor.
	EraC Era = "c"
	// EraCStub is EraC whose DrainWorker answers Unimplemented (#730's stubs).
	EraCStub Era = "c-stub"
	// EraD is the multi-actor era with ListWorkerActorAssignments.
	EraD Era = "d"
)

// Eras lists every era the fake serves.
func Eras() []Era { return []Era{EraB2, EraC, EraCStub, EraD} }

const serviceName = "ateapi.Control"

// protoDir maps an era to its proto directory; stub eras share a schema.
func (e Era) protoDir() (string, error) {
	switch e {
	case EraB2, EraC, EraD:
		return string(e), nil
	case EraCStub:
		return string(EraC), nil
	}
	return "", fmt.Errorf("fakesubstrate: unknown era %q", e)
}

// schema is the parsed descriptor set of one era.
type schema struct {
	files   *protoregistry.Files
	service protoreflect.ServiceDescriptor
	file    protoreflect.FileDescriptor
}

// ProtoSource returns the era's .proto text, for tools that want the schema.
func ProtoSource(e Era) (string, error) {
	dir, err := e.protoDir()
	if err != nil {
		return "", err
	}
	b, err := fs.ReadFile(protoFS, "protos/"+dir+"/ateapi.proto")
	return string(b), err
}

func loadSchema(e Era) (*schema, error) {
	dir, err := e.protoDir()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(protoFS, "protos/"+dir)
	if err != nil {
		return nil, err
	}
	p := protoparse.Parser{
		Accessor: func(name string) (io.ReadCloser, error) { return sub.Open(name) },
	}
	fds, err := p.ParseFiles("ateapi.proto")
	if err != nil {
		return nil, fmt.Errorf("fakesubstrate: parse era %s: %w", e, err)
	}
	files := new(protoregistry.Files)
	if err := registerFile(files, fds[0]); err != nil {
		return nil, err
	}
	fd := fds[0].UnwrapFile()
	svc := fd.Services().ByName(protoreflect.Name(strings.TrimPrefix(serviceName, "ateapi.")))
	if svc == nil {
		return nil, fmt.Errorf("fakesubstrate: era %s has no %s", e, serviceName)
	}
	return &schema{files: files, service: svc, file: fd}, nil
}

// registerFile adds a file and its imports so reflection can serve them all.
func registerFile(files *protoregistry.Files, fd *desc.FileDescriptor) error {
	if _, err := files.FindFileByPath(fd.GetName()); err == nil {
		return nil
	}
	for _, dep := range fd.GetDependencies() {
		if err := registerFile(files, dep); err != nil {
			return err
		}
	}
	return files.RegisterFile(fd.UnwrapFile())
}
