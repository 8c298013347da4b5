package planes

// PlaneState is the aggregated health of a plane.
type PlaneState string

// Plane states.
const (
	PlaneHealthy  PlaneState = "healthy"
	PlaneDegraded PlaneState = "degraded"
	PlaneDown     PlaneState = "down"
	PlaneDraining PlaneState = "draining"
)

// LinkState is the health of one link.
type LinkState string

// Link states.
const (
	LinkUp       LinkState = "up"
	LinkDegraded LinkState = "degraded"
	LinkDown     LinkState = "down"
)

// ValidPlaneState reports whether s names a plane state.
func ValidPlaneState(s string) bool {
	switch PlaneState(s) {
	case PlaneHealthy, PlaneDegraded, PlaneDown, PlaneDraining:
		return true
	}
	return false
}

// ValidLinkState reports whether s names a link state.
func ValidLinkState(s string) bool {
	switch LinkState(s) {
	case LinkUp, LinkDegraded, LinkDown:
		return true
	}
	return false
}

// InitialState is the state a subject of kind (SubjectPlane, SubjectSwitch,
// SubjectLink) has before anything happened to it.
func InitialState(kind string) string {
	if kind == SubjectLink {
		return string(LinkUp)
	}
	return string(PlaneHealthy)
}
