package fakesubstrate

// The fake stores states as pkg/atestate names them (the enum-name suffixes
// every era shares); it deliberately does not import the client it tests.

// ActorRef names an actor.
type ActorRef struct{ Atespace, Name string }
