package kv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Perm is one permission of an etcd role: on Key, or on every key under
// it when Prefix is set.
type Perm struct {
	Key    string
	Prefix bool
	Write  bool // read and write; read only when false
}

// RoleOf is the etcd role of a confined user.
func RoleOf(user string) string { return "confined:" + user }

// ErrReservedUser is returned for a user name etcd or fabricd reserve.
var ErrReservedUser = errors.New("kv: reserved etcd user name")

// EnsureUser makes user (no password: its client certificate's Common
// Name authenticates it) hold exactly perms, through its own role
// RoleOf(user); it creates what is missing and revokes what is not in
// perms. Calling it again with the same perms changes nothing.
func EnsureUser(ctx context.Context, cli *clientv3.Client, user string, perms []Perm) error {
	if user == "" || user == RootUser {
		return fmt.Errorf("%w: %q", ErrReservedUser, user)
	}
	role := RoleOf(user)
	if _, err := cli.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("kv: etcd role %s: %w", role, err)
	}
	have, err := cli.RoleGet(ctx, role)
	if err != nil {
		return fmt.Errorf("kv: etcd role %s: %w", role, err)
	}
	want := map[[2]string]clientv3.PermissionType{}
	for _, p := range perms {
		end := ""
		if p.Prefix {
			end = clientv3.GetPrefixRangeEnd(p.Key)
		}
		t := clientv3.PermissionType(clientv3.PermRead)
		if p.Write {
			t = clientv3.PermissionType(clientv3.PermReadWrite)
		}
		want[[2]string{p.Key, end}] = t
	}
	for _, p := range have.Perm {
		k := [2]string{string(p.Key), string(p.RangeEnd)}
		if t, ok := want[k]; ok && t == clientv3.PermissionType(p.PermType) {
			delete(want, k) // already granted
			continue
		}
		if _, err := cli.RoleRevokePermission(ctx, role, k[0], k[1]); err != nil {
			return fmt.Errorf("kv: etcd role %s: revoke %q: %w", role, k[0], err)
		}
	}
	keys := make([][2]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return cmp.Compare(a[0], b[0]) })
	for _, k := range keys {
		if _, err := cli.RoleGrantPermission(ctx, role, k[0], k[1], want[k]); err != nil {
			return fmt.Errorf("kv: etcd role %s: grant %q: %w", role, k[0], err)
		}
	}
	if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("kv: etcd user %s: %w", user, err)
	}
	u, err := cli.UserGet(ctx, user)
	if err != nil {
		return fmt.Errorf("kv: etcd user %s: %w", user, err)
	}
	for _, r := range u.Roles {
		if r != role {
			if _, err := cli.UserRevokeRole(ctx, user, r); err != nil {
				return fmt.Errorf("kv: etcd user %s: revoke role %s: %w", user, r, err)
			}
		}
	}
	if !slices.Contains(u.Roles, role) {
		if _, err := cli.UserGrantRole(ctx, user, role); err != nil {
			return fmt.Errorf("kv: etcd user %s: %w", user, err)
		}
	}
	return nil
}

// RemoveUser deletes user and its role; a user or role that is not
// there is not an error.
func RemoveUser(ctx context.Context, cli *clientv3.Client, user string) error {
	if user == "" || user == RootUser {
		return fmt.Errorf("%w: %q", ErrReservedUser, user)
	}
	if _, err := cli.UserDelete(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("kv: etcd user %s: %w", user, err)
	}
	if _, err := cli.RoleDelete(ctx, RoleOf(user)); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("kv: etcd role %s: %w", RoleOf(user), err)
	}
	return nil
}

// ConfinedUsers lists the users EnsureUser made (those with a role of
// their own).
func ConfinedUsers(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	resp, err := cli.UserList(ctx)
	if err != nil {
		return nil, fmt.Errorf("kv: etcd users: %w", err)
	}
	var out []string
	for _, u := range resp.Users {
		if u == RootUser {
			continue
		}
		r, err := cli.UserGet(ctx, u)
		if err == nil && slices.Contains(r.Roles, RoleOf(u)) {
			out = append(out, u)
		}
	}
	return out, nil
}
